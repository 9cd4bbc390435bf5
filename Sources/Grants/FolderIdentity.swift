@preconcurrency import Glibc
import CSyscalls
import Sandbox
import SystemPackage

/// What tells one folder from every other, now and after a rename or move.
///
/// The file handle (`name_to_handle_at`) is the truth: ext4 reuses inode
/// numbers at once and birth times have 4 ms granularity, but a recreated
/// folder always gets a new handle. Device, fsid, inode and birth time are
/// kept as hints for messages and for finding the filesystem again.
public struct FolderIdentity: Equatable, Sendable {
    public var handleType: Int32
    public var handle: [UInt8]
    /// The handle came from `AT_HANDLE_FID` (overlayfs): it identifies but cannot open.
    public var handleIsFID: Bool
    public var device: UInt64
    public var filesystemID: UInt64
    public var filesystemType: UInt64
    public var inode: UInt64
    public var birthSeconds: Int64?
    public var birthNanoseconds: UInt32

    /// Reads the identity of the folder that `fd` holds.
    public static func of(_ fd: OwnedDescriptor, path: FilePath) throws(GrantError) -> FolderIdentity {
        var raw = csb_file_handle()
        var mountID: CInt = 0
        var isFID: CInt = 0
        guard csb_name_to_handle(fd.rawValue, &raw, &mountID, &isFID) == 0 else {
            throw .noFolderIdentity(folder: "\(path)", errno: Errno(rawValue: errno))
        }
        let handle = withUnsafeBytes(of: raw.f_handle) { Array($0.prefix(Int(raw.handle_bytes))) }
        let st: stat
        do { st = try fd.status() } catch { throw .noFolderIdentity(folder: "\(path)", errno: error) }
        var fsid: UInt64 = 0
        var fsType: UInt64 = 0
        _ = csb_filesystem_identity(fd.rawValue, &fsid, &fsType)
        var seconds: Int64 = 0
        var nanoseconds: UInt32 = 0
        let hasBirth = csb_birth_time(fd.rawValue, &seconds, &nanoseconds) == 0
        return FolderIdentity(
            handleType: raw.handle_type, handle: handle, handleIsFID: isFID != 0, device: UInt64(st.st_dev),
            filesystemID: fsid, filesystemType: fsType, inode: UInt64(st.st_ino),
            birthSeconds: hasBirth ? seconds : nil, birthNanoseconds: nanoseconds)
    }

    /// Whether `other` is this very folder: same handle on the same
    /// filesystem (by device, or by fsid and type after a remount).
    public func isSameFolder(as other: FolderIdentity) -> Bool {
        guard handleType == other.handleType, handle == other.handle else { return false }
        return device == other.device || (filesystemID == other.filesystemID && filesystemType == other.filesystemType)
    }

    /// btrfs: each subvolume has its own st_dev and f_fsid.
    static let btrfsMagic: UInt64 = 0x9123_683E

    /// Whether `fd` lies on the filesystem this folder was on, as far as
    /// hints tell: the same device, the same fsid and type (a remount on
    /// another device), or on btrfs, where st_dev and the fsid's second word
    /// differ per subvolume, the fsid's first word (the filesystem's UUID
    /// folded, unchanged by subvolume ids below 2^32). Used to choose where
    /// to look and whether a stale handle means deleted, never as identity.
    func mayShareFilesystem(with fd: OwnedDescriptor) -> Bool {
        guard let st = try? fd.status() else { return false }
        if UInt64(st.st_dev) == device { return true }
        var fsid: UInt64 = 0
        var fsType: UInt64 = 0
        guard (try? syscallRetrying({ csb_filesystem_identity(fd.rawValue, &fsid, &fsType) })) != nil, fsType == filesystemType else { return false }
        if fsid == filesystemID { return true }
        let firstWord = { (value: UInt64) in withUnsafeBytes(of: value) { Array($0.prefix(4)) } }
        return fsType == Self.btrfsMagic && firstWord(fsid) == firstWord(filesystemID)
    }

    /// Whether `fd` is on a filesystem of the same type (the kind of handle it decodes).
    func hasFilesystemType(of fd: OwnedDescriptor) -> Bool {
        var fsid: UInt64 = 0
        var fsType: UInt64 = 0
        return (try? syscallRetrying({ csb_filesystem_identity(fd.rawValue, &fsid, &fsType) })) != nil && fsType == filesystemType
    }

    /// The raw handle for `open_by_handle_at`.
    var fileHandle: csb_file_handle {
        var raw = csb_file_handle()
        raw.handle_type = handleType
        raw.handle_bytes = UInt32(handle.count)
        withUnsafeMutableBytes(of: &raw.f_handle) { buffer in
            for (index, byte) in handle.enumerated() where index < buffer.count { buffer[index] = byte }
        }
        return raw
    }
}

extension OwnedDescriptor {
    /// The path the kernel has for this fd, as bytes, or nil for a deleted inode.
    public var currentPath: FilePath? { FilePath.ofDescriptor(rawValue) }

}
