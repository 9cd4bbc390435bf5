@preconcurrency import Glibc
import CSyscalls
import Foundation
import Sandbox
import SystemPackage
import Testing

/// LinkTrust's comparison of recorded folders with a link's ancestors.
@Suite struct LinkTrustTests {
    static func open(_ path: String) throws -> OwnedDescriptor {
        try OwnedDescriptor.openPath(FilePath(path), follow: true)
    }

    static func filesystem(_ fd: OwnedDescriptor) -> (id: UInt64, type: UInt64) {
        var id: UInt64 = 0, type: UInt64 = 0
        _ = csb_filesystem_identity(fd.rawValue, &id, &type)
        return (id, type)
    }

    /// A folder recorded with its filesystem: matched along the ancestors,
    /// wherever it is now; a handle recorded on another filesystem (every
    /// ext4 root folder has the same one) is not the same folder.
    @Test func aRecordedFolderIsMatchedWithItsFilesystem() throws {
        let scratch = NSTemporaryDirectory() + "link-trust-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: scratch + "/vault/deep", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let vault = try Self.open(scratch + "/vault")
        let handle = try #require(LinkTrust.handle(of: vault))
        let here = Self.filesystem(vault)
        let deep = try Self.open(scratch + "/vault/deep")
        let sameFilesystem = LinkTrust { .init(writable: [.init(handle: handle, filesystem: here)]) }
        #expect(sameFilesystem.appMayHaveWritten(deep) != nil)
        let otherFilesystem = LinkTrust { .init(writable: [.init(handle: handle, filesystem: (here.id &+ 1, here.type))]) }
        #expect(otherFilesystem.appMayHaveWritten(deep) == nil)
        // A grant recorded before filesystems were: its handle alone decides (stricter).
        let legacy = LinkTrust { .init(writable: [.init(handle: handle, filesystem: nil)]) }
        #expect(legacy.appMayHaveWritten(deep) != nil)
        // Nothing recorded: the folder is the user's.
        #expect(LinkTrust { .init() }.appMayHaveWritten(deep) == nil)
    }

    /// The collision that made a revoked grant of a disk's root folder
    /// distrust every link on the machine: the root folder of this `/`
    /// recorded as if on another filesystem is not `/`.
    @Test func aFilesystemRootRecordedElsewhereIsNotThisRoot() throws {
        let root = try Self.open("/")
        let handle = try #require(LinkTrust.handle(of: root))
        let here = Self.filesystem(root)
        let trust = LinkTrust { .init(writable: [.init(handle: handle, filesystem: (here.id ^ 0xFFFF, here.type))]) }
        #expect(trust.appMayHaveWritten(try Self.open("/usr")) == nil)
        #expect(trust.refusal(forLinkIn: root) == nil)
    }
}
