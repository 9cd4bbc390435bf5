@preconcurrency import Glibc
import CSyscalls
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
/// Paths are found as the command's call found them (`CommandPaths`, the
/// supervisor's own, in the command's namespace), with the command's powers:
/// what the report says, the command could have learnt by its own calls.
final class DenialObserver {
    struct Root {
        let rule: PathRule
        let identity: InodeIdentity
        let isDirectory: Bool
        /// What the command's layer allows beneath it, as the ruleset (or the keeper) was given it.
        let rights: Landlock.FileAccess
    }

    /// The rules of the command's layer, then those the keeper added in the
    /// command's namespace (its /proc and /dev/shm).
    private(set) var roots: [Root]
    private let ruleRoots: [Root]
    /// The rules on each inode, in rule order: a chain thousands deep costs a lookup per folder.
    private var rulesByInode: [InodeIdentity: [Root]]
    /// Folders above rules, remembered across denials (a denial-heavy command walks /etc once).
    private let walker = Ancestry.Walker(limit: 10_000)
    /// Finds what the command's paths name; the supervisor's, set at launch.
    var paths = CommandPaths()
    /// How the writable folders are kept apart; nil without Landlock.
    let reparenting: ReparentingLayers?
    let policyName: String
    /// The rights each rule gives, as the ruleset was built from them.
    let policy: Policy
    let containerRoot: String
    let reporter: DenialReporter

    init(rules: [PathRule], policy: Policy, containerRoot: String, reporter: DenialReporter, reparenting: ReparentingLayers?) {
        ruleRoots = rules.compactMap { rule in
            (try? rule.exposed.status()).map {
                Root(rule: rule, identity: $0.inodeIdentity, isDirectory: $0.isDirectory, rights: policy.landlockAccess(for: rule))
            }
        }
        roots = ruleRoots
        rulesByInode = Dictionary(grouping: ruleRoots, by: \.identity)
        policyName = policy.source
        self.policy = policy
        self.containerRoot = containerRoot
        self.reporter = reporter
        self.reparenting = reparenting
    }

    /// The devices of the private view's own folders (its root and /dev,
    /// read-only tmpfs): a path that ends in one of them, short of its last
    /// name, is outside the view. Empty in the host view.
    private var viewDevices: Set<UInt64> = []

    /// Called once `paths` resolves in the command's namespace: the private
    /// /proc (read-only), /dev/shm and /tmp (read-write) have rules of their own.
    /// `ownFiles`: files of the launcher's making in the view (the network
    /// by name's resolv.conf and hosts), readable by a rule of their own.
    func enterNamespace(privateMounts: [String], view: Bool = false, ownFiles: [String] = []) {
        roots = ruleRoots
        viewDevices = []
        if view {
            for folder in ["/", "/dev"] {
                let start = CommandPaths.Start.path(base: nil, Array(folder.utf8CString), follow: false)
                if let found = try? paths.resolve(start, caller: 0) { viewDevices.insert(UInt64(found.status.st_dev)) }
            }
        }
        for mount in privateMounts {
            let start = CommandPaths.Start.path(base: nil, Array(mount.utf8CString), follow: false)
            guard let found = try? paths.resolve(start, caller: 0), found.status.isDirectory else { continue }
            let rule = PathRule(origin: .namespace, path: FilePath(mount), descriptor: found.target, access: mount == "/proc" ? .readOnly : .readWrite)
            // The keeper gives the private /tmp a grant's rights (it holds binds of
            // grants): no links or executables there unless the policy allows them.
            let rights = mount == "/tmp" ? ConfinementPlan.temporaryRights(policy: policy, refer: true) : policy.landlockAccess(for: rule)
            roots.append(Root(rule: rule, identity: found.status.inodeIdentity, isDirectory: true, rights: rights))
        }
        for file in ownFiles where view {
            let start = CommandPaths.Start.path(base: nil, Array(file.utf8CString), follow: false)
            guard let found = try? paths.resolve(start, caller: 0), found.status.isRegularFile else { continue }
            let rule = PathRule(origin: .namespace, path: FilePath(file), descriptor: found.target, access: .readOnly)
            roots.append(Root(rule: rule, identity: found.status.inodeIdentity, isDirectory: false, rights: policy.landlockAccess(for: rule)))
        }
        rulesByInode = Dictionary(grouping: roots, by: \.identity)
    }

    /// What a call does to the path at `path` (resolved from `directory`).
    enum Effect {
        /// open/openat: read, write or create, from the flags at this
        /// argument (-1: creat's, O_CREAT | O_WRONLY | O_TRUNC).
        case open(flagsArgument: Int)
        /// makes a new name: write access to its folder. A name that exists
        /// fails with EEXIST before Landlock is asked (mkdir -p does that all along).
        case create
        /// makes the name, or replaces what it names (a rename's destination).
        case replace
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
        "creat": [PathArgument(directory: nil, path: 0, effect: .open(flagsArgument: -1))],
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
        "rename": [PathArgument(directory: nil, path: 0, effect: .remove), PathArgument(directory: nil, path: 1, effect: .replace)],
        "renameat": [PathArgument(directory: 0, path: 1, effect: .remove), PathArgument(directory: 2, path: 3, effect: .replace)],
        "renameat2": [PathArgument(directory: 0, path: 1, effect: .remove), PathArgument(directory: 2, path: 3, effect: .replace)],
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
    /// `powers`: the serving thread's, to resolve with the command's.
    func observe(_ request: csb_seccomp_notif, listener: CInt, powers: CallerPowers) -> csb_seccomp_notif_resp {
        var response = csb_seccomp_notif_resp()
        response.id = request.id
        response.flags = 1  // SECCOMP_USER_NOTIF_FLAG_CONTINUE
        guard let (name, arguments) = Self.byNumber[request.data.nr] else { return response }
        let args = withUnsafeBytes(of: request.data.args) { Array($0.bindMemory(to: UInt64.self)) }
        let caller = pid_t(truncatingIfNeeded: request.pid)
        if name == "socket" {
            response.flags = 0
            response.error = -EACCES  // the only socket calls the filter sends here are refused ones
            let denial = socketDenial(family: args[0])
            reporter.record(Self.socketProbe(args).map { denial.probe($0) } ?? denial)
            return response
        }
        if arguments.isEmpty {
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
        if Self.moves.contains(name) {
            observeMove(name, args: args, memory: memory, caller: caller, powers: powers)
            return response
        }
        for argument in arguments {
            guard let raw = try? memory.string(at: args[argument.path], limit: Int(PATH_MAX), tooLong: .fileNameTooLong), raw.count > 1 else { continue }
            let directory = argument.directory.map { Int32(truncatingIfNeeded: args[$0]) }
            var flags: Int32 = 0
            if case .open(let index) = argument.effect {
                flags = index < 0 ? O_CREAT | O_WRONLY | O_TRUNC : Int32(truncatingIfNeeded: args[index])
            }
            let link: Denial.Operation? = Self.linkMakers.contains(name) ? .link : nil
            guard let denial = predict(
                raw, directory: directory, caller: caller, effect: argument.effect, openFlags: flags, syscall: name, link: link, powers: powers) else { continue }
            reporter.record(Self.openProbe(raw, flags: flags).map { denial.probe($0) } ?? denial)
        }
        // Nothing to decide: the kernel goes on whatever we found.
        _ = listener
        return response
    }

    /// The calls that make a symbolic link at their path.
    static let linkMakers: Set<String> = ["symlink", "symlinkat"]

    /// The denial Landlock will make, or nil when a rule allows it (or the
    /// call fails before Landlock is asked: a path that does not resolve, a
    /// name made that exists, one removed that does not). `link`: the call
    /// puts a symbolic link at the path, reported as this operation.
    func predict(
        _ raw: [CChar], directory: Int32?, caller: pid_t, effect: Effect, openFlags: Int32 = 0, syscall: String,
        link: Denial.Operation? = nil, powers: CallerPowers
    ) -> Denial? {
        guard let start = try? powers.withOurs({ () throws(Errno) -> CommandPaths.Start in
            try paths.start(path: raw, directory: directory, emptyPath: false, follow: true, caller: caller)
        }) else { return nil }
        let predicted = try? powers.asChild { () throws(Errno) -> Denial? in
            let shown = paths.shown(start)
            var operation: Denial.Operation = switch effect {
            case .open where openFlags & O_CREAT == 0 && openFlags & O_ACCMODE == O_RDONLY && openFlags & O_TRUNC == 0: .read
            case .execute: .execute
            default: .write
            }
            do throws(Errno) {
                return try predictLandlock(
                    start, shown: shown, caller: caller, effect: effect, openFlags: openFlags, syscall: syscall, link: link, operation: &operation)
            } catch .noSuchFileOrDirectory where !viewDevices.isEmpty {
                // Not found: refused by the view when the walk ended in one of its own folders.
                guard outsideView(start, caller: caller) else { return nil }
                return Denial(
                    operation: operation, layer: .view, syscall: syscall, path: shown,
                    reason: "not in the sandbox's view, where only the container, the grants and the policy's system paths exist: "
                        + reason(operation: operation, covering: nil, path: shown), errno: ENOENT)
            }
        }
        return predicted ?? nil
    }

    /// Whether the last folder `start` reaches before a name that does not
    /// exist is one of the view's own (its root, /dev): the name is then
    /// outside the view, as the command's own walk could tell.
    private func outsideView(_ start: CommandPaths.Start, caller: pid_t) -> Bool {
        guard case .path(let base, let raw, _) = start else { return false }
        let slash = CChar(UInt8(ascii: "/")), dot = CChar(UInt8(ascii: "."))
        let bytes = Array(raw.prefix { $0 != 0 })
        // "." and empty names are nothing to the kernel's walk: dropped, so
        // a hostile spelling of many "./" costs one resolve per real name.
        var names = bytes.split(separator: slash, omittingEmptySubsequences: true).filter { !($0.count == 1 && $0.first == dot) }
        let absolute = bytes.first == slash
        guard names.count <= 64 else { return false }
        while !names.isEmpty {
            names.removeLast()
            var folder = Array(names.joined(separator: [slash]))
            if absolute { folder.insert(slash, at: 0) }
            if folder.isEmpty { folder = [dot] }
            if let found = try? paths.resolve(.path(base: base, folder + [0], follow: true), caller: caller) {
                return viewDevices.contains(UInt64(found.status.st_dev))
            }
        }
        return false
    }

    /// The Landlock part of `predict`; ENOENT escapes to it.
    private func predictLandlock(
        _ start: CommandPaths.Start, shown: [UInt8], caller: pid_t, effect: Effect, openFlags: Int32, syscall: String,
        link: Denial.Operation?, operation: inout Denial.Operation
    ) throws(Errno) -> Denial? {
        let chain: [InodeIdentity]
        /// The folder a name is made in or removed from; `exists`: whether the name must be there for Landlock to be asked.
        var viewFolder = false
        func folder(exists: Bool?) throws(Errno) -> [InodeIdentity]? {
            guard let parent = try paths.parent(start, caller: caller) else { return nil }
            // One of the view's own folders: read-only, whatever the name (EROFS comes first).
            if !viewDevices.isEmpty, let status = try? parent.folder.status(), viewDevices.contains(UInt64(status.st_dev)) {
                viewFolder = true
                return []
            }
            if let exists {
                var status = stat()
                guard (fstatat(parent.folder.rawValue, parent.name, &status, AT_SYMLINK_NOFOLLOW) == 0) == exists else { return nil }
            }
            return try walk(parent.folder)
        }
        switch effect {
        case .open where openFlags & O_CREAT != 0:
            if let existing = try? paths.resolve(start, caller: caller) {
                guard openFlags & O_EXCL == 0 else { return nil }  // EEXIST
                chain = try self.chain(of: existing)  // O_CREAT of an existing file: a write to it
            } else {
                guard let found = try folder(exists: nil) else { return nil }
                chain = found
            }
        case .open:
            let writes = openFlags & O_ACCMODE != O_RDONLY || openFlags & O_TRUNC != 0
            operation = writes ? .write : .read
            chain = try self.chain(of: try paths.resolve(start, caller: caller))
        case .create, .replace, .remove:
            let exists: Bool? = switch effect {
            case .create: false
            case .remove: true
            default: nil
            }
            guard let found = try folder(exists: exists) else { return nil }
            chain = found
        case .write:
            chain = try self.chain(of: try paths.resolve(start, caller: caller))
        case .execute:
            operation = .execute
            chain = try self.chain(of: try paths.resolve(start, caller: caller))
        }
        if viewFolder {
            return Denial(
                operation: .write, layer: .view, syscall: syscall, path: shown,
                reason: "is in one of the sandbox's own read-only folders (only the container, the grants and the policy's "
                    + "system paths exist there): " + reason(operation: .write, covering: nil, path: shown), errno: EROFS)
        }
        // Landlock grants the union of every rule that covers the path.
        let covering = chain.flatMap { rulesByInode[$0] ?? [] }
        let allowed: Bool = switch operation {
        case .read: !covering.isEmpty
        case .write: covering.contains { $0.rule.access == .readWrite }
        case .execute: covering.contains { $0.rights.contains(.execute) }
        default: true
        }
        guard !allowed else {
            // Writing is not enough for a link: Landlock's make-symlink right
            // is left out of writable folders unless the policy has the key.
            guard let link, !rights(covering).contains(.makeSym) else { return nil }
            return Denial(operation: link, layer: .landlock, syscall: syscall, path: shown, reason: linkReason(covering), errno: EACCES)
        }
        return Denial(
            operation: operation, layer: .landlock, syscall: syscall, path: shown,
            reason: reason(operation: operation, covering: covering.first?.rule, path: shown), errno: EACCES)
    }

    /// The identities of `resolved` and every folder above it, in the command's view.
    private func chain(of resolved: CommandPaths.Resolved) throws(Errno) -> [InodeIdentity] {
        if resolved.status.isDirectory { return try walk(resolved.target) }
        if let folder = resolved.folder { return [resolved.status.inodeIdentity] + (try walk(folder)) }
        let folder = try paths.folder(holding: resolved.target, identity: resolved.status.inodeIdentity, unlinked: false)
        return [resolved.status.inodeIdentity] + (try walk(folder))
    }

    private func walk(_ folder: OwnedDescriptor) throws(Errno) -> [InodeIdentity] {
        guard let chain = walker.chain(of: folder) else { throw .noSuchFileOrDirectory }
        return chain
    }

    /// The most specific rule that covers the inode `target` holds.
    func covering(_ target: OwnedDescriptor) -> PathRule? {
        guard let status = try? target.status(),
              let chain = try? chain(of: CommandPaths.Resolved(target: target, status: status, folder: nil)) else { return nil }
        for identity in chain { if let root = rulesByInode[identity]?.first { return root.rule } }
        return nil
    }

    // MARK: Renames and links

    static let moves: Set<String> = ["rename", "renameat", "renameat2", "link", "linkat"]

    /// A rename or link: the folders' own rights first (Landlock answers
    /// EACCES before EXDEV), then the reparenting rule.
    private func observeMove(_ name: String, args: [UInt64], memory: ChildMemory, caller: pid_t, powers: CallerPowers) {
        let renames = name.hasPrefix("rename")
        let at = name != "rename" && name != "link"
        let flags = name == "renameat2" || name == "linkat" ? UInt32(truncatingIfNeeded: args[4]) : 0
        func string(_ index: Int) -> [CChar]? { try? memory.string(at: args[index], limit: Int(PATH_MAX), tooLong: .fileNameTooLong) }
        guard let old = string(at ? 1 : 0), let new = string(at ? 3 : 1), new.count > 1 else { return }
        let oldDirectory = at ? Int32(truncatingIfNeeded: args[0]) : nil
        let newDirectory = at ? Int32(truncatingIfNeeded: args[2]) : nil
        let exchange = renames && flags & 2 != 0  // RENAME_EXCHANGE: the destination moves back
        var refused = false
        if renames, old.count > 1, let denial = predict(old, directory: oldDirectory, caller: caller, effect: .remove, syscall: name, powers: powers) {
            reporter.record(denial)
            refused = true
        }
        let made: Effect = exchange ? .remove : renames ? .replace : .create
        // Moving or hard-linking a symbolic link makes one where it lands (Landlock asks for MAKE_SYM there).
        let follows = !renames && flags & 0x400 != 0  // AT_SYMLINK_FOLLOW
        let movedLink = exchange || follows || old.count <= 1 ? nil : shownLink(old, directory: oldDirectory, caller: caller, powers: powers)
        let link: Denial.Operation? = movedLink == nil ? nil : renames ? .rename : .link
        if let denial = predict(new, directory: newDirectory, caller: caller, effect: made, syscall: name, link: link, powers: powers) {
            // A link refused where it lands: said as "old -> new", as the reparenting rule's are.
            let moved = link != nil && denial.operation == link && denial.layer == .landlock && denial.destination == nil
            reporter.record(!moved ? denial : Denial(
                operation: denial.operation, layer: denial.layer, syscall: denial.syscall, path: movedLink, reason: denial.reason,
                errno: denial.errno, destination: denial.path))
            refused = true
        }
        guard !refused else { return }
        let move = Move(
            syscall: name, renames: renames, exchange: exchange, keepsDestination: !renames || flags & 1 != 0,  // RENAME_NOREPLACE
            follow: follows,
            emptyPath: !renames && flags & UInt32(CSB_AT_EMPTY_PATH) != 0 && old.count <= 1)
        if let denial = predictReparenting(move, old: old, oldDirectory: oldDirectory, new: new, newDirectory: newDirectory, caller: caller, powers: powers) {
            reporter.record(denial)
        }
    }

    /// `raw` as shown, when it names a symbolic link itself (its last name not followed); nil otherwise.
    private func shownLink(_ raw: [CChar], directory: Int32?, caller: pid_t, powers: CallerPowers) -> [UInt8]? {
        guard let start = try? powers.withOurs({ () throws(Errno) -> CommandPaths.Start in
            try paths.start(path: raw, directory: directory, emptyPath: false, follow: false, caller: caller)
        }) else { return nil }
        let found = try? powers.asChild { () throws(Errno) -> [UInt8]? in
            guard let parent = try paths.parent(start, caller: caller) else { return nil }
            var status = stat()
            guard fstatat(parent.folder.rawValue, parent.name, &status, AT_SYMLINK_NOFOLLOW) == 0, status.st_mode & S_IFMT == S_IFLNK else { return nil }
            return paths.shown(start)
        }
        return found ?? nil
    }

    struct Move {
        let syscall: String
        let renames: Bool
        let exchange: Bool
        /// A link, or RENAME_NOREPLACE: an existing destination is EEXIST, before Landlock is asked.
        let keepsDestination: Bool
        /// linkat's AT_SYMLINK_FOLLOW: the file a link (or /proc/self/fd/N) leads to is linked.
        let follow: Bool
        /// linkat's AT_EMPTY_PATH with an empty path: the descriptor's file is linked.
        let emptyPath: Bool
    }

    /// Landlock's reparenting rule, as the kernel will apply it to the
    /// command's layer and to the layers that keep writable folders apart.
    private func predictReparenting(
        _ move: Move, old: [CChar], oldDirectory: Int32?, new: [CChar], newDirectory: Int32?, caller: pid_t, powers: CallerPowers
    ) -> Denial? {
        guard let reparenting,
              let (source, destination) = try? powers.withOurs({ () throws(Errno) -> (CommandPaths.Start, CommandPaths.Start) in
                  (try paths.start(path: old, directory: oldDirectory, emptyPath: move.emptyPath, follow: move.follow, caller: caller),
                   try paths.start(path: new, directory: newDirectory, emptyPath: false, follow: false, caller: caller))
              }) else { return nil }
        let predicted = try? powers.asChild { () throws(Errno) -> Denial? in
            // What moves, the folder it leaves, and the mount the kernel compares.
            let moved: stat
            let folder: OwnedDescriptor
            let mounted: OwnedDescriptor
            switch source {
            case .descriptor(let file):
                // A /proc/self/fd/N link not followed is procfs's own: another mount.
                guard move.emptyPath || move.follow else { return nil }
                moved = try file.status()
                guard !moved.isDirectory else { return nil }  // folders are never linked
                folder = try paths.folder(holding: file, identity: moved.inodeIdentity, unlinked: true)
                mounted = file
            case .path where move.follow:
                let resolved = try paths.resolve(source, caller: caller)
                moved = resolved.status
                if let known = resolved.folder {
                    folder = known
                } else {
                    folder = try paths.folder(holding: resolved.target, identity: moved.inodeIdentity, unlinked: true)
                }
                mounted = resolved.target
            case .path:
                guard let parent = try paths.parent(source, caller: caller) else { return nil }
                let item = OwnedDescriptor(taking: try syscallRetrying { csb_openat2_path(parent.folder.rawValue, parent.name, 0) })
                moved = try item.status()
                folder = parent.folder
                mounted = move.renames ? parent.folder : item
            }
            guard let target = try paths.parent(destination, caller: caller) else { return nil }
            var existing = stat()
            let exists = fstatat(target.folder.rawValue, target.name, &existing, AT_SYMLINK_NOFOLLOW) == 0
            guard exists ? !move.keepsDestination : !move.exchange else { return nil }  // EEXIST, or ENOENT
            // Within one folder there is no reparenting.
            let sourceFolder = try walk(folder)
            let destinationFolder = try walk(target.folder)
            guard sourceFolder.first != destinationFolder.first else { return nil }
            // On two mounts, the kernel answers EXDEV before Landlock is asked: not the sandbox's doing.
            guard let sourceMount = mounted.mountID, let destinationMount = target.folder.mountID, sourceMount == destinationMount else { return nil }
            guard let why = reparentingRefusal(
                moved: moved, from: sourceFolder, to: destinationFolder, exchange: move.exchange, mode: reparenting.mode,
                writable: reparenting.folders) else { return nil }
            return Denial(
                operation: move.renames ? .rename : .link, layer: .landlock, syscall: move.syscall, path: paths.shown(source),
                reason: why, errno: EXDEV, destination: paths.shown(destination))
        }
        return predicted ?? nil
    }

    /// Why the kernel will refuse to move `moved` from the folder whose chain
    /// is `source` into the one whose chain is `destination`, or nil.
    func reparentingRefusal(
        moved: stat, from source: [InodeIdentity], to destination: [InodeIdentity], exchange: Bool,
        mode: ReparentingLayers.Mode, writable: [(rule: PathRule, identity: InodeIdentity)]
    ) -> String? {
        let sourceRules = source.flatMap { rulesByInode[$0] ?? [] }
        let destinationRules = destination.flatMap { rulesByInode[$0] ?? [] }
        let rule = "Landlock's reparenting rule"
        // The command's layer allows REFER in the writable folders (and the
        // private /dev/shm) unless they cannot be kept apart.
        func refers(_ rules: [Root]) -> Bool {
            rules.contains { $0.isDirectory && $0.rule.access == .readWrite && ($0.rule.origin == .namespace || mode != .refused) }
        }
        for (rules, direction) in [(sourceRules, "out of"), (destinationRules, "into")] where !refers(rules) {
            if mode == .refused, rules.contains(where: { $0.isDirectory && $0.rule.access == .readWrite }) {
                let why = writable.count > ReparentingLayers.maximumLayers
                    ? "more than \(ReparentingLayers.maximumLayers) writable folders"
                    : "this kernel's Landlock cannot keep writable folders apart (IOCTL_DEV, ABI 5, is missing)"
                return "\(rule): nothing is renamed or linked into another folder, in any writable folder (\(why)); copy instead (mv does)"
            }
            return "\(rule): \(place(rules)) is not writable, and nothing is moved or linked \(direction) such a folder; copy instead"
        }
        // No right gained: the moved file's own rules count at the source.
        let own = rulesByInode[moved.inodeIdentity] ?? []
        let relevant: Landlock.FileAccess = moved.isDirectory ? .handled(byABI: Landlock.newestKnownABI) : .fileOnly
        let sourceRights = rights(own + sourceRules).intersection(relevant)
        let destinationRights = rights(destinationRules).intersection(relevant)
        if !destinationRights.isSubset(of: sourceRights) || exchange && !sourceRights.isSubset(of: destinationRights) {
            return "\(rule): the file would gain rights in \(place(destinationRules)) that it has not in \(place(sourceRules)); copy instead"
        }
        guard mode == .separated else { return nil }
        let writableIdentities = Set(writable.map(\.identity))
        let leaving = Set(([moved.inodeIdentity] + source).filter(writableIdentities.contains))
        let entering = Set(destination.filter(writableIdentities.contains))
        let gained = entering.subtracting(leaving)
        let lost = exchange ? leaving.subtracting(entering).subtracting([moved.inodeIdentity]) : []
        guard !gained.isEmpty || !lost.isEmpty else { return nil }
        let into = writable.filter { gained.union(lost).contains($0.identity) }.map { describe($0.rule) }.joined(separator: " and ")
        return "\(rule): from \(place(sourceRules)) into \(into), another writable folder: each keeps its files to itself "
            + "(one Landlock layer each), so that no hard link outlives a grant; copy instead (mv does)"
    }

    /// What the command's layer grants under `rules`.
    private func rights(_ rules: [Root]) -> Landlock.FileAccess {
        rules.reduce(into: []) { union, root in
            var granted = root.rights
            if !root.isDirectory { granted.formIntersection(.fileOnly) }
            union.formUnion(granted)
        }
    }

    /// The most specific of `rules` (chain order: innermost first), in the user's words.
    private func place(_ rules: [Root]) -> String {
        guard let rule = rules.first?.rule else { return "a folder outside every grant" }
        return describe(rule)
    }

    private func describe(_ rule: PathRule) -> String { rule.shownName }

    // MARK: Known probes

    /// bash's check_dev_tty(): open("/dev/tty", O_RDWR | O_NONBLOCK) at start, closed at once.
    static func openProbe(_ raw: [CChar], flags: Int32) -> String? {
        guard raw.prefix(while: { $0 != 0 }).elementsEqual("/dev/tty".utf8.map { CChar(bitPattern: $0) }),
              flags & O_ACCMODE == O_RDWR, flags & O_NONBLOCK != 0, flags & O_CREAT == 0 else { return nil }
        return "bash opens /dev/tty at start to see whether it has a controlling terminal, and goes on without"
    }

    /// glibc's nscd client: socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0).
    static func socketProbe(_ args: [UInt64]) -> String? {
        guard args[0] == 1, UInt32(truncatingIfNeeded: args[1]) == 0x80801, args[2] == 0 else { return nil }
        return "the socket glibc opens to ask the nscd cache about users, groups and hosts (others may open one alike); "
            + "without it, glibc reads /etc/passwd and the like itself"
    }

    /// Why a symbolic link may not be put in a writable folder, and the key (and built-in policy) that allows it.
    private func linkReason(_ covering: [Root]) -> String {
        let names = Self.builtinsWithLinks
        let builtins = names.isEmpty ? "" : names.count == 1 ? " (the built-in policy \(names[0]) has it: --policy \(names[0]))"
            : " (the built-in policies \(names.joined(separator: ", ")) have it)"
        return "makes a symbolic link in \(place(covering)), and policy \(policyName) allows none in its folders: "
            + "\(Policy.symbolicLinksKey) allows them" + builtins
    }

    /// The shipped policies that allow links, read from them: named to the user as the way out.
    static let builtinsWithLinks = Policy.builtinNames.filter { Policy.builtin(named: $0)?.symbolicLinks == true }

    /// The advice, in the vocabulary of grants and policy keys.
    func reason(operation: Denial.Operation, covering rule: PathRule?, path: [UInt8]) -> String {
        let needed: Policy.PathAccess = operation == .execute ? .readExecute : operation == .write ? .readWrite : .readOnly
        let key = "org.sandboxed-run.system-paths.\(needed.rawValue)"
        if let rule {
            let verb = operation == .execute ? "executing" : "writing"
            switch rule.origin {
            case .namespace:
                return "is in the sandbox's own \(Printable.path(bytes: rule.path.bytes)), which is \(rule.access.rawValue)"
            case .system, .launcher:
                return "is in the policy's system path \(Printable.path(bytes: rule.path.bytes)), which is \(rule.access.rawValue) in policy \(policyName); \(verb) needs \(key)"
            case .container where operation == .execute:
                return "is in the app's container, and policy \(policyName) lets the command execute no file in its container or grants "
                    + "(\(Policy.executeFilesKey)); or install tools in a system path of the policy (\(key))"
            case .container:
                return "is in the app's container, which is read-write"
            case .grant(let name):
                if operation == .execute {
                    return "is in grant \(name), and policy \(policyName) lets the command execute no file in its grants or container (\(Policy.executeFilesKey))"
                }
                return "is in \(rule.shownName), which is \(rule.access.rawValue); grant it read-write to allow this"
            }
        }
        let text = String(decoding: path, as: UTF8.self)
        let systemFolders = ["/etc", "/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/opt", "/var", "/srv", "/proc", "/sys", "/dev", "/run", "/boot", "/snap"]
        // /var/tmp is the users' as much as /tmp is: a path there is theirs.
        if !(text == "/var/tmp" || text.hasPrefix("/var/tmp/")), systemFolders.contains(where: { text == $0 || text.hasPrefix($0 + "/") }) {
            return "not in policy \(policyName) (\(key))"
        }
        return "outside every grant: a hardcoded path? The container is $HOME (\(Printable.path(containerRoot))); grant its folder to the app"
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
}
