import CSyscalls
import SystemPackage

/// Landlock, the unprivileged path and port access control of Linux 5.13+.
public enum Landlock {
    /// The newest ABI this code knows; the kernel may offer more.
    public static let newestKnownABI = 7

    /// The kernel's Landlock ABI, 0 when Landlock is absent or disabled.
    public static func abiVersion() -> Int {
        Int(csb_landlock_abi_version())
    }

    /// File-system access rights (`LANDLOCK_ACCESS_FS_*`).
    public struct FileAccess: OptionSet, Sendable, Hashable {
        public let rawValue: UInt64
        public init(rawValue: UInt64) { self.rawValue = rawValue }

        public static let execute = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_EXECUTE)
        public static let writeFile = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_WRITE_FILE)
        public static let readFile = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_READ_FILE)
        public static let readDir = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_READ_DIR)
        public static let removeDir = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_REMOVE_DIR)
        public static let removeFile = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_REMOVE_FILE)
        public static let makeChar = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_MAKE_CHAR)
        public static let makeDir = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_MAKE_DIR)
        public static let makeReg = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_MAKE_REG)
        public static let makeSock = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_MAKE_SOCK)
        public static let makeFifo = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_MAKE_FIFO)
        public static let makeBlock = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_MAKE_BLOCK)
        public static let makeSym = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_MAKE_SYM)
        public static let refer = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_REFER)
        public static let truncate = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_TRUNCATE)
        public static let ioctlDev = FileAccess(rawValue: CSB_LANDLOCK_ACCESS_FS_IOCTL_DEV)

        /// Every right the given ABI can handle.
        public static func handled(byABI abi: Int) -> FileAccess {
            var all = FileAccess(rawValue: (1 << 13) - 1)
            if abi >= 2 { all.insert(.refer) }
            if abi >= 3 { all.insert(.truncate) }
            if abi >= 5 { all.insert(.ioctlDev) }
            return abi >= 1 ? all : []
        }

        /// The rights that make sense on a non-directory (Landlock refuses others).
        public static let fileOnly: FileAccess = [.execute, .writeFile, .readFile, .truncate, .ioctlDev]

        public static let readOnly: FileAccess = [.readFile, .readDir]
        public static let readExecute: FileAccess = [.readFile, .readDir, .execute]
        /// Full use of a folder's contents: everything but executing files
        /// and making device nodes.
        public static let readWrite: FileAccess = [
            .readFile, .readDir, .writeFile, .truncate, .removeDir, .removeFile, .makeDir, .makeReg,
            .makeSym, .makeFifo, .makeSock, .refer,
        ]
    }

    /// TCP rights (`LANDLOCK_ACCESS_NET_*`, ABI 4).
    public struct NetworkAccess: OptionSet, Sendable {
        public let rawValue: UInt64
        public init(rawValue: UInt64) { self.rawValue = rawValue }
        public static let bindTCP = NetworkAccess(rawValue: CSB_LANDLOCK_ACCESS_NET_BIND_TCP)
        public static let connectTCP = NetworkAccess(rawValue: CSB_LANDLOCK_ACCESS_NET_CONNECT_TCP)
    }

    /// IPC scopes (`LANDLOCK_SCOPE_*`, ABI 6).
    public struct Scope: OptionSet, Sendable {
        public let rawValue: UInt64
        public init(rawValue: UInt64) { self.rawValue = rawValue }
        public static let abstractUnixSocket = Scope(rawValue: CSB_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET)
        public static let signal = Scope(rawValue: CSB_LANDLOCK_SCOPE_SIGNAL)
    }
}

/// A Landlock ruleset being filled in the parent; the child only calls
/// `landlock_restrict_self` on it.
final class LandlockRuleset {
    let descriptor: OwnedDescriptor
    let handledFiles: Landlock.FileAccess

    init(files: Landlock.FileAccess, network: Landlock.NetworkAccess, scope: Landlock.Scope) throws(Errno) {
        var attr = csb_landlock_ruleset_attr(
            handled_access_fs: files.rawValue, handled_access_net: network.rawValue, scoped: scope.rawValue)
        descriptor = OwnedDescriptor(taking: try syscallRetrying { csb_landlock_create_ruleset(&attr) })
        handledFiles = files
    }

    /// Allows `access` beneath the inode that `fd` holds: the rule binds to
    /// that inode, so the caller must pass the fd it verified.
    /// `access` as this ruleset handles it: what a rule added later, in the
    /// keeper, may carry.
    func rights(_ access: Landlock.FileAccess) -> Landlock.FileAccess { access.intersection(handledFiles) }

    func allow(_ access: Landlock.FileAccess, beneath fd: OwnedDescriptor) throws(Errno) {
        var rights = access.intersection(handledFiles)
        if try !fd.status().isDirectory { rights.formIntersection(.fileOnly) }
        guard !rights.isEmpty else { return }
        _ = try syscallRetrying { csb_landlock_add_path_rule(descriptor.rawValue, fd.rawValue, rights.rawValue) }
    }

    func allow(_ access: Landlock.NetworkAccess, port: UInt16) throws(Errno) {
        _ = try syscallRetrying { csb_landlock_add_port_rule(descriptor.rawValue, UInt64(port), access.rawValue) }
    }
}
