@preconcurrency import Glibc
import CSandbox
import CSeccomp
import SystemPackage

/// Under `--explain`, the syscall filter sends path-taking calls, the
/// syscalls it refuses and refused sockets here (seccomp user notification).
/// The observer predicts whether Landlock will refuse the call, by finding
/// which rule covers the path and with what access, reports a predicted
/// denial, and always lets the kernel go on (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`):
/// it never decides. A child that rewrites the path after we read it can
/// only confuse its own report, never widen its access. Refused syscalls are
/// answered with the very errno the filter would give: the same outcome.
final class DenialObserver {
    struct Root {
        let rule: FolderRule
        let identity: InodeIdentity
    }

    let roots: [Root]
    /// The rules on each inode, in rule order: a chain thousands deep costs a lookup per folder.
    private let rulesByInode: [InodeIdentity: [Root]]
    /// Folders above rules, remembered across denials (a denial-heavy command walks /etc once).
    private let walker = Ancestry.Walker(limit: 10_000)
    /// Mounts of the child's own namespace (`/proc`, `/dev/shm`), set at launch.
    var privateMounts: [[UInt8]] = []
    let policyName: String
    let containerRoot: String
    let reporter: DenialReporter

    init(rules: [FolderRule], policy: Policy, containerRoot: String, reporter: DenialReporter) {
        roots = rules.compactMap { rule in (try? rule.descriptor.status().inodeIdentity).map { Root(rule: rule, identity: $0) } }
        rulesByInode = Dictionary(grouping: roots, by: \.identity)
        policyName = policy.source
        self.containerRoot = containerRoot
        self.reporter = reporter
    }

    /// What a call does to the path at `path` (resolved from `directory`).
    enum Effect {
        /// open/openat: read, write or create, from the flags at this argument.
        case open(flagsArgument: Int)
        /// creates the last component: write access to its folder.
        case create
        /// removes (or renames away) the last component: write access to its folder.
        case remove
        case execute
        /// changes the file's contents (truncate).
        case write
    }

    struct PathArgument {
        let directory: Int?
        let path: Int
        let effect: Effect
    }

    /// The paths each observed syscall names (x86-64 and arm64 share the argument order).
    static let pathCalls: [String: [PathArgument]] = [
        "open": [PathArgument(directory: nil, path: 0, effect: .open(flagsArgument: 1))],
        "openat": [PathArgument(directory: 0, path: 1, effect: .open(flagsArgument: 2))],
        "creat": [PathArgument(directory: nil, path: 0, effect: .create)],
        "execve": [PathArgument(directory: nil, path: 0, effect: .execute)],
        "execveat": [PathArgument(directory: 0, path: 1, effect: .execute)],
        "truncate": [PathArgument(directory: nil, path: 0, effect: .write)],
        "mkdir": [PathArgument(directory: nil, path: 0, effect: .create)],
        "mkdirat": [PathArgument(directory: 0, path: 1, effect: .create)],
        "mknod": [PathArgument(directory: nil, path: 0, effect: .create)],
        "mknodat": [PathArgument(directory: 0, path: 1, effect: .create)],
        "rmdir": [PathArgument(directory: nil, path: 0, effect: .remove)],
        "unlink": [PathArgument(directory: nil, path: 0, effect: .remove)],
        "unlinkat": [PathArgument(directory: 0, path: 1, effect: .remove)],
        "rename": [PathArgument(directory: nil, path: 0, effect: .remove), PathArgument(directory: nil, path: 1, effect: .create)],
        "renameat": [PathArgument(directory: 0, path: 1, effect: .remove), PathArgument(directory: 2, path: 3, effect: .create)],
        "renameat2": [PathArgument(directory: 0, path: 1, effect: .remove), PathArgument(directory: 2, path: 3, effect: .create)],
        "link": [PathArgument(directory: nil, path: 1, effect: .create)],
        "linkat": [PathArgument(directory: 2, path: 3, effect: .create)],
        "symlink": [PathArgument(directory: nil, path: 1, effect: .create)],
        "symlinkat": [PathArgument(directory: 1, path: 2, effect: .create)],
    ]

    /// Refused syscalls (errno rules) that the filter sends here under `--explain`.
    static var refusedSyscalls: [String] {
        SyscallFilter.neverAllowed.keys.filter {
            !SyscallFilter.supervised.contains($0) && !SyscallFilter.answeredWithENOSYS.contains($0)
        }.sorted()
    }

    private static let byNumber: [Int32: (name: String, paths: [PathArgument])] = {
        var table: [Int32: (String, [PathArgument])] = [:]
        for (name, paths) in pathCalls { if let number = SyscallFilter.number(name) { table[number] = (name, paths) } }
        for name in refusedSyscalls + ["socket"] { if let number = SyscallFilter.number(name) { table[number] = (name, []) } }
        return table
    }()

    static func observes(_ number: Int32) -> Bool { byNumber[number] != nil }

    /// Answers one notification: CONTINUE for a path call, the filter's own
    /// errno for a refused syscall. Never throws, never blocks on the child.
    func observe(_ request: csb_seccomp_notif, listener: CInt) -> csb_seccomp_notif_resp {
        var response = csb_seccomp_notif_resp()
        response.id = request.id
        response.flags = 1  // SECCOMP_USER_NOTIF_FLAG_CONTINUE
        guard let (name, paths) = Self.byNumber[request.data.nr] else { return response }
        let args = withUnsafeBytes(of: request.data.args) { Array($0.bindMemory(to: UInt64.self)) }
        let caller = pid_t(truncatingIfNeeded: request.pid)
        if name == "socket" {
            response.flags = 0
            response.error = -EACCES  // the only socket calls the filter sends here are refused ones
            reporter.record(socketDenial(family: args[0]))
            return response
        }
        if paths.isEmpty {
            response.flags = 0
            let code = SyscallFilter.answeredWithENOSYS.contains(name) ? ENOSYS : EPERM
            response.error = -code
            let why = SyscallFilter.neverAllowed[name] ?? "not allowed"
            reporter.record(Denial(
                operation: .syscall, layer: .syscallFilter, syscall: name, path: nil,
                reason: "never allowed: \(why); no policy key allows it", errno: code))
            return response
        }
        let memory = ChildMemory(pid: caller)
        for argument in paths {
            guard let raw = try? memory.string(at: args[argument.path], limit: Int(PATH_MAX), tooLong: .fileNameTooLong), raw.count > 1 else { continue }
            let bytes = raw.dropLast().map { UInt8(bitPattern: $0) }
            let directory = argument.directory.map { Int32(truncatingIfNeeded: args[$0]) } ?? AT_FDCWD
            var effect = argument.effect
            if case .open(let index) = effect {
                let flags = Int32(truncatingIfNeeded: args[index])
                let writes = flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0
                effect = flags & O_CREAT != 0 ? .create : writes ? .write : .open(flagsArgument: -1)
                if flags & O_CREAT != 0, let denial = predict(bytes, directory: directory, caller: caller, effect: .create, syscall: name, creating: true) {
                    // O_CREAT on an existing file opens it for writing.
                    reporter.record(denial)
                    continue
                }
                if flags & O_CREAT != 0 { continue }
            }
            if let denial = predict(bytes, directory: directory, caller: caller, effect: effect, syscall: name, creating: false) {
                reporter.record(denial)
            }
        }
        // Nothing to decide: the kernel goes on whatever we found.
        _ = listener
        return response
    }

    /// The denial Landlock will make, or nil when a rule allows it (or the
    /// path does not resolve: the call fails on its own).
    func predict(_ bytes: [UInt8], directory: Int32, caller: pid_t, effect: Effect, syscall: String, creating: Bool) -> Denial? {
        // The child's own /proc and /dev/shm (its mount namespace) are not ours to resolve; they have their rules.
        if privateMounts.contains(where: { bytes.starts(with: $0) && (bytes.count == $0.count || bytes[$0.count] == UInt8(ascii: "/")) }) {
            return nil
        }
        guard let base = baseDirectory(for: bytes, directory: directory, caller: caller) else { return nil }
        let shown = displayPath(bytes, base: base)
        let operation: Denial.Operation
        let target: OwnedDescriptor
        switch effect {
        case .create, .remove:
            if creating, let existing = open(bytes, base: base, follow: true, caller: caller) {
                target = existing  // O_CREAT of an existing file: a write to it
                operation = .write
            } else {
                guard let parent = openParent(bytes, base: base, caller: caller) else { return nil }
                target = parent
                operation = .write
            }
        case .write:
            guard let file = open(bytes, base: base, follow: true, caller: caller) else { return nil }
            target = file
            operation = .write
        case .execute:
            guard let file = open(bytes, base: base, follow: true, caller: caller) else { return nil }
            target = file
            operation = .execute
        case .open:
            guard let file = open(bytes, base: base, follow: true, caller: caller) else { return nil }
            target = file
            operation = .read
        }
        guard let chain = walker.chain(of: target) else { return nil }
        // Landlock grants the union of every rule that covers the path.
        let covering = chain.flatMap { rulesByInode[$0] ?? [] }
        let allowed: Bool = switch operation {
        case .read: !covering.isEmpty
        case .write: covering.contains { $0.rule.access == .readWrite }
        case .execute: covering.contains { $0.rule.access == .readExecute }
        default: true
        }
        guard !allowed else { return nil }
        return Denial(
            operation: operation, layer: .landlock, syscall: syscall, path: shown,
            reason: reason(operation: operation, covering: covering.first?.rule, path: shown), errno: EACCES)
    }

    /// The most specific rule that covers the inode `target` holds.
    func covering(_ target: OwnedDescriptor) -> FolderRule? {
        guard let chain = walker.chain(of: target) else { return nil }
        for identity in chain { if let root = rulesByInode[identity]?.first { return root.rule } }
        return nil
    }

    /// The advice, in the vocabulary of grants and policy keys.
    func reason(operation: Denial.Operation, covering rule: FolderRule?, path: [UInt8]) -> String {
        let needed: Policy.PathAccess = operation == .execute ? .readExecute : operation == .write ? .readWrite : .readOnly
        let key = "org.sandboxed-run.system-paths.\(needed.rawValue)"
        if let rule {
            let verb = operation == .execute ? "executing" : "writing"
            switch rule.name {
            case "system":
                return "is in the policy's system path \(Printable.path(bytes: rule.path.bytes)), which is \(rule.access.rawValue) in policy \(policyName); \(verb) needs \(key)"
            case "container":
                return "is in the app's container, which is read-write: files there cannot be executed; install tools in a system path of the policy (\(key))"
            default:
                if operation == .execute {
                    return "is in grant \(rule.name), which is \(rule.access.rawValue): files in grants cannot be executed"
                }
                return "is in grant \(rule.name), which is \(rule.access.rawValue); grant it read-write to allow this"
            }
        }
        let text = String(decoding: path, as: UTF8.self)
        let systemFolders = ["/etc", "/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/opt", "/var", "/srv", "/proc", "/sys", "/dev", "/run", "/boot", "/snap"]
        if systemFolders.contains(where: { text == $0 || text.hasPrefix($0 + "/") }) {
            return "not in policy \(policyName) (\(key))"
        }
        return "outside every grant: a hardcoded path? The container is $HOME (\(Printable.path(containerRoot))); grant its folder with --grant NAME=BOOKMARK"
    }

    private func socketDenial(family: UInt64) -> Denial {
        let names: [UInt64: String] = [1: "AF_UNIX", 2: "AF_INET", 10: "AF_INET6", 16: "AF_NETLINK", 17: "AF_PACKET"]
        let name = names[family] ?? "family \(family)"
        let reason: String
        switch family {
        case 1: reason = "never allowed: a new AF_UNIX socket could connect to a pathname socket outside, which Landlock does not mediate before ABI 9"
        case 17: reason = "never allowed: raw packet sockets"
        case 16: reason = "only NETLINK_ROUTE is allowed, with a network entitlement"
        default:
            reason = "policy \(policyName) has no network entitlement: com.apple.security.network.client (outgoing) or com.apple.security.network.server (listening)"
        }
        return Denial(operation: .network, layer: .syscallFilter, syscall: "socket", path: nil, reason: "\(name): \(reason)", errno: EACCES)
    }

    // MARK: resolution, as the child would (with our powers: only predicting)

    /// The folder a relative path starts from: the caller's cwd or its descriptor.
    private func baseDirectory(for bytes: [UInt8], directory: Int32, caller: pid_t) -> OwnedDescriptor? {
        if bytes.first == UInt8(ascii: "/") { return Self.openRaw("/", follow: true) }
        if directory == AT_FDCWD { return Self.openRaw("/proc/\(caller)/cwd", follow: true) }
        guard directory >= 0 else { return nil }
        return Self.openRaw("/proc/\(caller)/fd/\(directory)", follow: true)
    }

    private func open(_ bytes: [UInt8], base: OwnedDescriptor, follow: Bool, caller: pid_t = 0) -> OwnedDescriptor? {
        let rewritten = Self.rewriteProcSelf(bytes, caller: caller)
        let fd = (rewritten + [0]).withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { csb_openat2_path(base.rawValue, $0.baseAddress, follow ? 1 : 0) }
        }
        return fd >= 0 ? OwnedDescriptor(taking: fd) : nil
    }

    private func openParent(_ bytes: [UInt8], base: OwnedDescriptor, caller: pid_t) -> OwnedDescriptor? {
        var trimmed = bytes[...]
        while trimmed.count > 1, trimmed.last == UInt8(ascii: "/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: UInt8(ascii: "/")) else { return Self.dup(base) }
        let parent = slash == trimmed.startIndex ? [UInt8(ascii: "/")] : Array(trimmed[..<slash])
        return open(parent, base: base, follow: true, caller: caller)
    }

    /// /proc/self would name the launcher: the observer only predicts, but should predict for the child.
    private static func rewriteProcSelf(_ bytes: [UInt8], caller: pid_t) -> [UInt8] {
        guard caller > 0 else { return bytes }
        for prefix in ["/proc/self", "/proc/thread-self"] {
            let head = Array(prefix.utf8)
            if bytes.starts(with: head), bytes.count == head.count || bytes[head.count] == UInt8(ascii: "/") {
                return Array("/proc/\(caller)".utf8) + bytes[head.count...]
            }
        }
        return bytes
    }

    private static func dup(_ fd: OwnedDescriptor) -> OwnedDescriptor? {
        let copy = fcntl(fd.rawValue, F_DUPFD_CLOEXEC, 0)
        return copy >= 0 ? OwnedDescriptor(taking: copy) : nil
    }

    private static func openRaw(_ path: String, follow: Bool) -> OwnedDescriptor? {
        let fd = csb_open_path(AT_FDCWD, path, follow ? 1 : 0)
        return fd >= 0 ? OwnedDescriptor(taking: fd) : nil
    }

    /// What the user sees: an absolute path as given, a relative one after its base folder's path.
    private func displayPath(_ bytes: [UInt8], base: OwnedDescriptor) -> [UInt8] {
        if bytes.first == UInt8(ascii: "/") { return bytes }
        guard let folder = FilePath.ofDescriptor(base.rawValue) else { return bytes }
        return folder.bytes + [UInt8(ascii: "/")] + bytes
    }
}
