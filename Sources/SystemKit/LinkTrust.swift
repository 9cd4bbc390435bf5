@preconcurrency import Glibc
import CSyscalls
import SystemPackage

/// Which symbolic links an unconfined process may follow on a path a person
/// gave it (a note to append to, a folder to sync, a bookmark file, a policy
/// file). An app can write links wherever it can write, and keeps what it
/// wrote after its grant is revoked or its folder moved: the moment a user
/// distrusts it is the moment a planted `Daily -> /elsewhere` would send an
/// unconfined command elsewhere. So a link is followed only when it lies in a
/// folder that
/// - no app could write, now or once: not at or below an app container, and
///   not at or below a folder whose file handle the state ever let an app
///   write (a read-write grant, live, revoked, pending or moved; a policy's
///   read-write system folder). Handles are compared along the link's folder
///   and its ancestors, so a vault moved elsewhere is still recognised, with
///   no privilege (`name_to_handle_at` needs none);
/// - no one but the invoking user (or root) can write, as OpenSSH refuses
///   files others could have written: root acting in a user's vault (sudo,
///   cron) has another state, which knows nothing of that user's grants.
///
/// The state is read only when a link is met: a path without links costs no
/// ledger read.
public final class LinkTrust: @unchecked Sendable {
    /// What the state knows of the folders apps can write or could once.
    public struct Facts: Sendable {
        /// Folders whose whole subtree apps can write (the container base), opened.
        public var folders: [OwnedDescriptor]
        /// Folders an app could write at some time, wherever they are now.
        public var writable: [FolderKey]
        /// Set when the state cannot say (unreadable, damaged): no link is
        /// trusted, since any folder might be an app's. The reason, for people.
        public var unknown: String?

        public init(folders: [OwnedDescriptor] = [], writable: [FolderKey] = [], unknown: String? = nil) {
            self.folders = folders
            self.writable = writable
            self.unknown = unknown
        }
    }

    /// A folder as the state recorded it: its file handle, and the
    /// filesystem it is on (f_fsid and f_type) where that was recorded. A
    /// handle alone is ambiguous across filesystems (every ext4 root folder
    /// has the same one), so it is compared with the filesystem when known.
    public struct FolderKey: Sendable, Hashable {
        public var handle: [UInt8]
        public var filesystem: (id: UInt64, type: UInt64)?

        public init(handle: [UInt8], filesystem: (id: UInt64, type: UInt64)?) {
            self.handle = handle
            self.filesystem = filesystem
        }

        public static func == (a: FolderKey, b: FolderKey) -> Bool {
            a.handle == b.handle && a.filesystem?.id == b.filesystem?.id && a.filesystem?.type == b.filesystem?.type
        }

        public func hash(into hasher: inout Hasher) { hasher.combine(handle) }
    }

    private let load: () -> Facts
    private var loaded: Facts?
    /// Every link is the user's own (no app is involved): followed.
    public let followsEveryLink: Bool
    private let invoker: uid_t

    /// `load` is called once, when the first question needs it.
    public init(invoker: uid_t = geteuid(), load: @escaping () -> Facts) {
        self.load = load
        self.invoker = invoker
        followsEveryLink = false
    }

    /// Links are refused at or below `folders` (which apps can write), and
    /// where someone else could have planted them.
    public convenience init(appFolders folders: [OwnedDescriptor], invoker: uid_t = geteuid()) {
        self.init(invoker: invoker) { Facts(folders: folders) }
    }

    private init(everyLink: Bool) {
        load = { Facts() }
        invoker = geteuid()
        followsEveryLink = everyLink
    }

    /// For paths no app is involved in: links are followed as the kernel would.
    public static func everyLink() -> LinkTrust { LinkTrust(everyLink: true) }

    private var facts: Facts {
        if let loaded { return loaded }
        let facts = load()
        loaded = facts
        return facts
    }

    /// Why a symbolic link found in `folder` must not be followed (a phrase
    /// that follows "is a symbolic link"), or nil when it may be.
    public func refusal(forLinkIn folder: OwnedDescriptor) -> String? {
        if followsEveryLink { return nil }
        guard let status = try? folder.status() else { return "inside a folder that cannot be examined" }
        if status.st_uid != invoker && status.st_uid != 0 {
            return "inside a folder owned by user \(status.st_uid), who could have planted it"
        }
        if status.st_mode & 0o022 != 0 {
            return "inside a folder others can write (mode \(String(status.st_mode & 0o7777, radix: 8)))"
        }
        if let reason = appMayHaveWritten(folder) { return reason }
        return nil
    }

    /// Why `folder` may hold what an app wrote (a phrase: "inside a folder an
    /// app can write ..."), or nil when no app could.
    /// A folder whose place cannot be proven counts as an app's (fail closed).
    public func appMayHaveWritten(_ folder: OwnedDescriptor) -> String? {
        if followsEveryLink { return nil }
        let facts = self.facts
        if let unknown = facts.unknown { return "inside a folder that may be an app's (\(unknown))" }
        let roots = Set(facts.folders.compactMap { try? $0.status().inodeIdentity })
        let writable = facts.writable
        var reason: String?
        do {
            try Ancestry.walkUp(from: folder) { current, status in
                if roots.contains(status.inodeIdentity) {
                    reason = "inside a folder an app can write (an app container)"
                } else if !writable.isEmpty, let handle = Self.handle(of: current), writable.contains(where: { key in
                    key.handle == handle && key.filesystem.map { recorded in Self.filesystem(of: current).map { $0 == recorded } ?? true } ?? true
                }) {
                    reason = "inside a folder an app can write or once could (a read-write grant, live, revoked or moved, or a policy's read-write folder)"
                }
                return reason == nil
            }
        } catch {
            return "inside a folder whose place cannot be proven"
        }
        return reason
    }

    /// Why a file the invoking user names for an unconfined command to read
    /// as its own (a policy) or to write (a denial log) could have been
    /// written or replaced by someone else, or nil: as OpenSSH's
    /// `secure_filename`, the file and every folder above it must belong to
    /// the invoking user or root and be writable by no one else, except a
    /// folder with the sticky bit (`/tmp`), where no one else can replace
    /// what is ours.
    public func ownershipRefusal(ofFile file: stat, in folder: OwnedDescriptor) -> String? {
        if followsEveryLink { return nil }
        if file.st_uid != invoker && file.st_uid != 0 { return "it belongs to user \(file.st_uid), who could rewrite it" }
        if file.st_mode & 0o022 != 0 { return "others can write it (mode \(String(file.st_mode & 0o7777, radix: 8)))" }
        var reason: String?
        do {
            try Ancestry.walkUp(from: folder) { _, status in
                if status.st_uid != invoker && status.st_uid != 0 {
                    reason = "a folder above it belongs to user \(status.st_uid), who could replace it"
                } else if status.st_mode & 0o022 != 0 && status.st_mode & S_ISVTX == 0 {
                    reason = "others can write a folder above it (mode \(String(status.st_mode & 0o7777, radix: 8))) and could replace it"
                }
                return reason == nil
            }
        } catch {
            return "a folder above it cannot be examined"
        }
        return reason
    }

    /// The filesystem's f_fsid and f_type, or nil when fstatfs fails.
    package static func filesystem(of folder: OwnedDescriptor) -> (id: UInt64, type: UInt64)? {
        var id: UInt64 = 0
        var type: UInt64 = 0
        return csb_filesystem_identity(folder.rawValue, &id, &type) == 0 ? (id, type) : nil
    }

    /// The folder's file handle, or nil where the filesystem gives none.
    public static func handle(of folder: OwnedDescriptor) -> [UInt8]? {
        var raw = csb_file_handle()
        var mountID: CInt = 0
        var isFID: CInt = 0
        guard csb_name_to_handle(folder.rawValue, &raw, &mountID, &isFID) == 0 else { return nil }
        return withUnsafeBytes(of: raw.f_handle) { Array($0.prefix(Int(raw.handle_bytes))) }
    }
}
