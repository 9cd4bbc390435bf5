@preconcurrency import Glibc
import CSandbox
import CSeccomp
import SystemPackage

/// Landlock does not mediate chmod, chown, utimes or xattrs, so the filter
/// sends them here (seccomp user notification). The supervisor resolves the
/// target as the child would, allows it only beneath a writable folder, and
/// performs the change itself with the child's powers (effective
/// capabilities cleared on this thread). It never answers "continue": the
/// kernel would re-read the child's memory after our check, a race the child
/// could win.
final class MetadataSupervisor {
    /// The identities of the folders where metadata may change, and of
    /// everything the sandbox may read; their fds stay open, so the inode
    /// numbers cannot be reused meanwhile.
    private let writable: Set<InodeIdentity>
    private let readable: Set<InodeIdentity>
    private let pinned: [OwnedDescriptor]

    init(writableRoots: [OwnedDescriptor], readableRoots: [OwnedDescriptor]) {
        pinned = writableRoots + readableRoots
        writable = Set(writableRoots.compactMap { try? $0.status().inodeIdentity })
        readable = Set(readableRoots.compactMap { try? $0.status().inodeIdentity })
    }

    enum Operation {
        case chmod, chown, utime, utimes, utimensat, setxattr, removexattr
        /// `inotify_add_watch(fd, path, mask)`: allowed beneath readable folders.
        case watch
    }

    /// How one syscall names its target and operation.
    struct Shape {
        let operation: Operation
        /// Argument index of a dirfd, or nil for AT_FDCWD.
        let directoryArgument: Int?
        /// Argument index of the path, or nil when the syscall takes an fd.
        let pathArgument: Int?
        let follows: Bool
        /// Argument index of AT_* flags, if any.
        let flagsArgument: Int?
    }

    static let shapes: [Int32: Shape] = {
        var table: [Int32: Shape] = [:]
        func add(_ name: String, _ shape: Shape) {
            let number = seccomp_syscall_resolve_name(name)
            if number != __NR_SCMP_ERROR { table[number] = shape }
        }
        add("chmod", Shape(operation: .chmod, directoryArgument: nil, pathArgument: 0, follows: true, flagsArgument: nil))
        add("fchmod", Shape(operation: .chmod, directoryArgument: 0, pathArgument: nil, follows: true, flagsArgument: nil))
        add("fchmodat", Shape(operation: .chmod, directoryArgument: 0, pathArgument: 1, follows: true, flagsArgument: nil))
        add("chown", Shape(operation: .chown, directoryArgument: nil, pathArgument: 0, follows: true, flagsArgument: nil))
        add("lchown", Shape(operation: .chown, directoryArgument: nil, pathArgument: 0, follows: false, flagsArgument: nil))
        add("fchown", Shape(operation: .chown, directoryArgument: 0, pathArgument: nil, follows: true, flagsArgument: nil))
        add("fchownat", Shape(operation: .chown, directoryArgument: 0, pathArgument: 1, follows: true, flagsArgument: 4))
        add("utime", Shape(operation: .utime, directoryArgument: nil, pathArgument: 0, follows: true, flagsArgument: nil))
        add("utimes", Shape(operation: .utimes, directoryArgument: nil, pathArgument: 0, follows: true, flagsArgument: nil))
        add("futimesat", Shape(operation: .utimes, directoryArgument: 0, pathArgument: 1, follows: true, flagsArgument: nil))
        add("utimensat", Shape(operation: .utimensat, directoryArgument: 0, pathArgument: 1, follows: true, flagsArgument: 3))
        add("setxattr", Shape(operation: .setxattr, directoryArgument: nil, pathArgument: 0, follows: true, flagsArgument: nil))
        add("lsetxattr", Shape(operation: .setxattr, directoryArgument: nil, pathArgument: 0, follows: false, flagsArgument: nil))
        add("fsetxattr", Shape(operation: .setxattr, directoryArgument: 0, pathArgument: nil, follows: true, flagsArgument: nil))
        add("removexattr", Shape(operation: .removexattr, directoryArgument: nil, pathArgument: 0, follows: true, flagsArgument: nil))
        add("lremovexattr", Shape(operation: .removexattr, directoryArgument: nil, pathArgument: 0, follows: false, flagsArgument: nil))
        add("fremovexattr", Shape(operation: .removexattr, directoryArgument: 0, pathArgument: nil, follows: true, flagsArgument: nil))
        add("inotify_add_watch", Shape(operation: .watch, directoryArgument: nil, pathArgument: 1, follows: true, flagsArgument: nil))
        return table
    }()

    /// Receives one request and answers it. Errors answer the child, never crash us.
    func serveOne(listener: CInt) {
        var request = csb_seccomp_notif()
        guard csb_seccomp_notify_receive(listener, &request) == 0 else { return }  // ENOENT: the caller died
        var response = csb_seccomp_notif_resp()
        response.id = request.id
        do {
            response.val = try handle(request, listener: listener)
        } catch {
            response.error = -error.rawValue
        }
        _ = csb_seccomp_notify_respond(listener, &response)
    }

    /// Returns the syscall's result for the child.
    private func handle(_ request: csb_seccomp_notif, listener: CInt) throws(Errno) -> Int64 {
        guard let shape = Self.shapes[request.data.nr] else { throw .notPermitted }
        let memory = ChildMemory(pid: pid_t(request.pid))
        let args = withUnsafeBytes(of: request.data.args) { Array($0.bindMemory(to: UInt64.self)) }
        let flags = shape.flagsArgument.map { Int32(truncatingIfNeeded: args[$0]) } ?? 0
        let inotifyDontFollow: UInt64 = 0x0200_0000  // IN_DONT_FOLLOW, in the mask
        let follows = shape.follows && flags & AT_SYMLINK_NOFOLLOW == 0
            && !(shape.operation == .watch && args[2] & inotifyDontFollow != 0)

        // Everything the operation needs is copied out of the child first.
        let path: String? = try shape.pathArgument.flatMap { index throws(Errno) in
            args[index] == 0 ? nil : try memory.string(at: args[index])
        }
        // The operation's own arguments follow the path, or the fd when there is none.
        let first = (shape.pathArgument ?? shape.directoryArgument ?? 0) + 1
        let details = try OperationDetails(shape.operation, args: args, first: first, memory: memory)

        let target: OwnedDescriptor
        if let path, !path.isEmpty {
            let base: OwnedDescriptor?
            if path.hasPrefix("/") {
                base = nil
            } else if let index = shape.directoryArgument, Int32(truncatingIfNeeded: args[index]) != AT_FDCWD {
                base = try openInChild(pid: request.pid, fd: Int32(truncatingIfNeeded: args[index]))
            } else {
                base = try Self.open("/proc/\(request.pid)/cwd", follow: true)
            }
            target = try OwnedDescriptor(taking: syscallRetrying {
                csb_openat2_path(base?.rawValue ?? AT_FDCWD, path, follows ? 1 : 0)
            })
        } else if path == nil || flags & CSB_AT_EMPTY_PATH != 0, let index = shape.directoryArgument {
            target = try openInChild(pid: request.pid, fd: Int32(truncatingIfNeeded: args[index]))
        } else {
            throw .noSuchFileOrDirectory
        }
        // The pid in the request may have been reused since we opened its /proc entries.
        guard csb_seccomp_notify_id_valid(listener, request.id) == 0 else { throw .noSuchProcess }
        if shape.operation == .watch {
            // Landlock answers EACCES for what lies outside; so do we.
            guard try isBeneath(target, roots: readable) else { throw .permissionDenied }
        } else {
            guard try isBeneath(target, roots: writable) else { throw .notPermitted }
        }
        return try asChild { () throws(Errno) in try details.perform(on: target, caller: pid_t(request.pid), args: args) }
    }

    private func openInChild(pid: UInt32, fd: Int32) throws(Errno) -> OwnedDescriptor {
        guard fd >= 0 else { throw .badFileDescriptor }
        return try Self.open("/proc/\(pid)/fd/\(fd)", follow: true)
    }

    private static func open(_ path: String, follow: Bool) throws(Errno) -> OwnedDescriptor {
        OwnedDescriptor(taking: try syscallRetrying { csb_open_path(AT_FDCWD, path, follow ? 1 : 0) })
    }

    /// True when `target` is one of `roots` or lies beneath one, walking
    /// parents by inode as Landlock does.
    func isBeneath(_ target: OwnedDescriptor, roots: Set<InodeIdentity>) throws(Errno) -> Bool {
        let status = try target.status()
        if roots.contains(status.inodeIdentity) { return true }
        var current: OwnedDescriptor
        if status.isDirectory {
            current = target
        } else {
            // A non-directory has no "..": find its folder by the name the
            // kernel keeps, then prove that name still holds this inode.
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let length = readlink("/proc/self/fd/\(target.rawValue)", &buffer, Int(PATH_MAX))
            guard length > 0 else { return false }
            let name = String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            guard name.hasPrefix("/"), !name.hasSuffix(" (deleted)"), let slash = name.lastIndex(of: "/") else { return false }
            let folder = slash == name.startIndex ? "/" : String(name[..<slash])
            let leaf = String(name[name.index(after: slash)...])
            current = try OwnedDescriptor(taking: syscallRetrying { csb_openat2_path(AT_FDCWD, folder, 0) })
            var entry = stat()
            guard fstatat(current.rawValue, leaf, &entry, AT_SYMLINK_NOFOLLOW) == 0,
                  entry.inodeIdentity == status.inodeIdentity else { return false }
        }
        for _ in 0..<4096 {
            let identity = try current.status().inodeIdentity
            if roots.contains(identity) { return true }
            let parent = try OwnedDescriptor(taking: syscallRetrying { csb_openat2_path(current.rawValue, "..", 0) })
            if try parent.status().inodeIdentity == identity { return false }  // reached /
            current = parent
        }
        return false
    }

    /// Runs `body` with this thread's effective capabilities cleared, so the
    /// kernel checks ownership and permissions as it would for the child.
    private func asChild<T>(_ body: () throws(Errno) -> T) throws(Errno) -> T {
        var saved: (UInt32, UInt32) = (0, 0)
        let cleared = withUnsafeMutableBytes(of: &saved) { csb_thread_effective_caps_clear($0.baseAddress!.assumingMemoryBound(to: UInt32.self)) }
        guard cleared == 0 else { throw .notPermitted }
        defer {
            let restored = withUnsafeBytes(of: saved) { csb_thread_effective_caps_restore($0.baseAddress!.assumingMemoryBound(to: UInt32.self)) }
            precondition(restored == 0, "could not restore the supervisor's capabilities")
        }
        return try body()
    }
}

/// The operation's own arguments, copied from the child.
private enum OperationDetails {
    case chmod(mode: UInt32)
    case chown(uid: UInt32, gid: UInt32)
    /// nil: set both times to now. Otherwise atime sec, nsec, mtime sec, nsec.
    case times([Int64]?)
    case setxattr(name: String, value: [UInt8], flags: Int32)
    case removexattr(name: String)
    case watch(mask: UInt32)

    init(_ operation: MetadataSupervisor.Operation, args: [UInt64], first: Int, memory: ChildMemory) throws(Errno) {
        func times(_ fieldCount: Int, nanosecondScale: Int64) throws(Errno) -> [Int64]? {
            guard args[first] != 0 else { return nil }
            let raw = try memory.bytes(at: args[first], count: fieldCount * 8)
            let fields = raw.withUnsafeBytes { Array($0.bindMemory(to: Int64.self)) }
            if fieldCount == 2 { return [fields[0], 0, fields[1], 0] }  // struct utimbuf
            return [fields[0], fields[1] * nanosecondScale, fields[2], fields[3] * nanosecondScale]
        }
        switch operation {
        case .chmod:
            self = .chmod(mode: UInt32(truncatingIfNeeded: args[first]))
        case .chown:
            self = .chown(uid: UInt32(truncatingIfNeeded: args[first]), gid: UInt32(truncatingIfNeeded: args[first + 1]))
        case .utime:
            self = .times(try times(2, nanosecondScale: 0))
        case .utimes:
            self = .times(try times(4, nanosecondScale: 1000))  // struct timeval[2]
        case .utimensat:
            self = .times(try times(4, nanosecondScale: 1))  // struct timespec[2], UTIME_NOW/OMIT kept
        case .setxattr:
            let size = Int(args[first + 2])
            guard size <= 65536 else { throw Errno(rawValue: E2BIG) }
            self = .setxattr(
                name: try memory.string(at: args[first], limit: 256),
                value: size == 0 ? [] : try memory.bytes(at: args[first + 1], count: size),
                flags: Int32(truncatingIfNeeded: args[first + 3]))
        case .removexattr:
            self = .removexattr(name: try memory.string(at: args[first], limit: 256))
        case .watch:
            self = .watch(mask: UInt32(truncatingIfNeeded: args[first]))
        }
    }

    /// Performs the operation; returns the syscall's result.
    func perform(on target: OwnedDescriptor, caller: pid_t, args: [UInt64]) throws(Errno) -> Int64 {
        let isSymlink = try target.status().isSymlink
        switch self {
        case .chmod(let mode):
            guard !isSymlink else { throw .notSupported }  // Linux has no symlink modes
            _ = try syscallRetrying { csb_chmod_fd(target.rawValue, mode) }
        case .chown(let uid, let gid):
            _ = try syscallRetrying { csb_chown_fd(target.rawValue, uid, gid) }
        case .times(let times):
            _ = try syscallRetrying { csb_utimens_fd(target.rawValue, times) }
        case .setxattr(let name, let value, let flags):
            guard !isSymlink else { throw .notPermitted }
            _ = try syscallRetrying { csb_setxattr_fd(target.rawValue, name, value, value.count, flags) }
        case .removexattr(let name):
            guard !isSymlink else { throw .notPermitted }
            _ = try syscallRetrying { csb_removexattr_fd(target.rawValue, name) }
        case .watch(let mask):
            // The watch goes on the child's own inotify instance, so the
            // descriptor we return is the child's.
            let instance = OwnedDescriptor(taking: try syscallRetrying {
                csb_copy_fd_of_thread(caller, Int32(truncatingIfNeeded: args[0]))
            })
            return Int64(try syscallRetrying { csb_inotify_watch_fd(instance.rawValue, target.rawValue, mask) })
        }
        return 0
    }
}

/// Reads a notifying child's memory (`process_vm_readv`), as the kernel
/// would copy its arguments.
private struct ChildMemory {
    let pid: pid_t

    func bytes(at address: UInt64, count: Int) throws(Errno) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        let read = buffer.withUnsafeMutableBytes { csb_read_process_memory(pid, address, $0.baseAddress, count) }
        guard read == count else { throw read < 0 ? Errno(rawValue: errno) : .badAddress }
        return buffer
    }

    /// A NUL-terminated string, read page by page so that a string ending
    /// just before an unmapped page still reads.
    func string(at address: UInt64, limit: Int = Int(PATH_MAX)) throws(Errno) -> String {
        var result: [UInt8] = []
        var cursor = address
        while result.count < limit {
            let toPageEnd = 4096 - Int(cursor % 4096)
            let chunk = try bytes(at: cursor, count: min(toPageEnd, limit - result.count))
            if let end = chunk.firstIndex(of: 0) {
                result += chunk[..<end]
                return String(decoding: result, as: UTF8.self)
            }
            result += chunk
            cursor += UInt64(chunk.count)
        }
        throw .fileNameTooLong
    }
}
