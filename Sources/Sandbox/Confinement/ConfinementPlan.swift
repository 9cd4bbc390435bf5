@preconcurrency import Glibc
import CSyscalls
import SystemPackage

/// Every rule, filter and string of one launch, built in the parent before
/// fork, so the child runs nothing but the C routine that applies them.
public final class ConfinementPlan: @unchecked Sendable {
    public let report: EnforcementReport
    public let container: AppContainer
    public let executable: String
    public let arguments: [String]
    /// `NAME=value` entries the command starts with, as bytes: a grant's
    /// path need not be UTF-8.
    public let environment: [[UInt8]]
    public let workingDirectory: String
    let workingDirectoryDescriptor: OwnedDescriptor

    let request: LaunchRequest
    let ruleset: LandlockRuleset?
    /// Keep the writable folders' files apart (entered before `ruleset`).
    let reparenting: ReparentingLayers?
    /// What renames and hard links may do, for `--report` (nil without Landlock).
    public var reparentingSummary: String? { reparenting?.summary }
    let restrictFlags: UInt32
    /// Built for `readOnlyMounts`; `filter(readOnlyMounts:)` builds the other.
    let filter: [UInt8]?
    /// The second filter: arguments the rule table cannot judge (ioctls,
    /// set-id modes, access mode 3, leases, others' scheduling, whiteouts).
    let argumentGuard: [UInt8]?
    let superviseMetadata: Bool
    /// The options `filter` was built with, nil without seccomp.
    let filterOptions: SyscallFilter.Options?
    /// Whether the launch asks the keeper for read-only mounts (see
    /// `LaunchRequest.readOnlyMounts`); `launch()` falls back to the
    /// supervisor when the descriptors or the kernel do not allow them.
    let readOnlyMounts: Bool
    /// The keeper's Landlock domain scopes signals (ABI 6): its kill(-1)
    /// then reaches the command's processes only. Without it, the keeper
    /// falls back to the process group and the orphans it inherits.
    let keeperScopesSignals: Bool
    let keeperRestrictFlags: UInt32
    /// Folders (and files) in which the supervisor may change metadata,
    /// pinned open: every read-write rule but device nodes.
    let writableRoots: [OwnedDescriptor]
    /// Their paths, in the same order: in the host view the keeper binds
    /// each over itself, writable.
    let writablePaths: [FilePath]
    /// The private view's steps, nil when the host view was asked for or
    /// the view cannot hold this launch (then `viewUnavailable` says why).
    let viewPlan: ViewPlan?
    /// Why the private view asked for cannot be had (the launch runs in the
    /// host view: only under best effort, else the plan threw).
    let viewUnavailable: String?
    /// The working directory by its kernel name: the child enters it by
    /// that name in the private view, where the links of the name the
    /// user gave may not exist.
    let viewWorkingDirectory: [UInt8]
    /// No network entitlement, or an allowed-hosts list: the private view
    /// gets a network namespace of its own.
    let privateNetwork: Bool
    /// The allowed-hosts list's sockets, ports and variables.
    let egress: EgressPlan?
    /// The files the view gets of its own with an allowed-hosts list: DNS
    /// goes to the stub, and no name of the host's /etc/hosts bypasses it.
    static let egressFiles: [String: String] = [
        "/etc/resolv.conf": "# sandboxed-run: the sandbox's DNS stub (allowed names only)\nnameserver 127.0.0.1\noptions edns0\n",
        "/etc/hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    ]
    /// That namespace, made on a thread while the launch is planned (root only; nil: the keeper makes it).
    let networkAhead: NetworkNamespaceAhead?
    /// No descriptor the command starts with is a folder (or an O_PATH
    /// descriptor), through which a path could leave the private view
    /// (`/proc/self/fd/N/..`): only then are attribute reads and watches native there.
    let descriptorsHoldNoFolder: Bool
    /// Everything the sandbox may read (system paths, container, grants),
    /// pinned open: where inotify watches may go.
    let readableRoots: [OwnedDescriptor]
    /// The launch's denials: counted always, explained under `--explain`/`--denials`.
    public let denials: DenialReporter
    /// Set only under `--explain`/`--denials`: the filter then sends path calls to it.
    let observer: DenialObserver?
    /// Whether each launch serves live-grant requests on a broker socket of
    /// its own (`ConfinedProcess.liveGrants`): false when the request takes
    /// none or the policy has neither a user-selected key nor `bookmarks.app-scope`.
    public let servesLiveGrants: Bool
    /// The view a launch starts in (a best-effort one may still fall back to the host view).
    public var plannedView: FileSystemView { viewPlan != nil ? .private : .host }
    /// Whether a grant is staged (`PathRule.staged`): the launch then runs
    /// in the private view or not at all, never falling back to the host view.
    let holdsStagedGrant: Bool
    /// The launch-time grants (by name) that get a mount of their own in the
    /// private view, which a revocation takes away while the command runs.
    public var revocableLaunchGrants: [String] { viewPlan?.revocableBinds.flatMap(\.grants) ?? [] }

    /// The variable that holds the broker's descriptor number in the command.
    public static let brokerVariable = "SANDBOXED_RUN_BROKER_FD"

    public static let sandboxPath = "/usr/local/bin:/usr/bin:/bin"

    public convenience init(_ request: LaunchRequest) throws(SandboxError) {
        try self.init(request, features: .probe())
    }

    /// `features` is what the kernel offers; tests pass an older kernel's.
    init(_ request: LaunchRequest, features: KernelFeatures) throws(SandboxError) {
        try LaunchRequest.checkKept(request.keptDescriptors)
        guard let name = request.command.first, !name.isEmpty else {
            throw .usage("no command given")
        }
        self.request = request
        let policy = request.policy
        // An allowed-hosts list: a namespace of its own all the same, the
        // launcher's proxy the only way out of it.
        let egress = policy.allowedHosts.map { EgressPlan(hosts: AllowedHosts($0)) }
        self.egress = egress
        if egress != nil {
            guard request.view == .private, request.privateNamespaces else {
                throw .usage("an allowed-hosts list (--allow-host, \(Policy.allowedHostsKey)) needs the private view: "
                    + "in the host view the command shares the host's network; run without --view host")
            }
        }
        // Started first, so that the kernel's work overlaps the planning below.
        let wantsPrivateNetwork = egress != nil || (!policy.networkClient && !policy.networkServer)
        let networkAhead = request.view == .private && request.privateNamespaces && wantsPrivateNetwork ? NetworkNamespaceAhead() : nil
        let protections = features.protections(for: policy)
        report = EnforcementReport(features: .init(landlockABI: features.landlockABI), protections: protections)
        if request.compatibility == .hardRequirement, !report.missing.isEmpty {
            throw .protectionUnavailable(missing: report.missing.map { "\($0.name): \($0.detail)" })
        }

        container = try AppContainer.current(for: request.app, base: request.containerBase)
        LaunchPhases.mark("container")
        arguments = request.command
        let launcher = request.exposeLauncher ? LauncherFiles.current : nil
        servesLiveGrants = request.liveGrants != .none && (policy.userSelectedAccess != nil || policy.bookmarksAppScope)
        environment = try Self.environment(for: request, container: container, launcher: launcher?.executable)

        let containerFolder = try PathRule(
            origin: .container, path: FilePath(container.root), descriptor: Self.openVerified(container.root), access: .readWrite)
        let folders = [containerFolder] + request.folders

        LaunchPhases.mark("environment")
        // With an allowed-hosts list the view's resolv.conf and hosts are the sandbox's own.
        let systemPaths = Self.openSystemPaths(policy).filter { rule in
            egress == nil || !Self.egressFiles.keys.contains(rule.path.string)
        } + (launcher?.rules ?? [])
        LaunchPhases.mark("system paths opened")
        // A staged grant is checked at the granted folder (what it exposes
        // the place of), its clone on its own: the one rule that may show
        // the sandbox something of the broker's state.
        try Self.checkNothingProtected(systemPaths: systemPaths, grants: request.folders, policy: policy, protected: request.protectedFolders)
        try Self.checkNothingReplaced(folders)
        holdsStagedGrant = request.folders.contains { $0.staged != nil }
        if holdsStagedGrant {
            try Self.checkStaged(request.folders, view: request.view, containerBase: request.containerBase, protected: request.protectedFolders)
        }
        LaunchPhases.mark("protected folders checked")
        // What the command reaches: a staged grant's clone, not the folder.
        readableRoots = systemPaths.map(\.exposed) + folders.map(\.exposed)
        // The same rights whatever the command's stdout is: a read-write
        // system path is as writable under read-only mounts (bound writable)
        // as under the supervisor (a writable root). Device nodes are never
        // the command's to chmod: their mount stays read-only.
        let writable = (folders + systemPaths).filter { rule in
            guard rule.access == .readWrite, let status = try? rule.exposed.status() else { return false }
            return status.isDirectory || status.isRegularFile
        }
        writableRoots = writable.map(\.exposed)
        writablePaths = writable.map(\.path)
        privateNetwork = wantsPrivateNetwork
        self.networkAhead = networkAhead
        descriptorsHoldNoFolder = Self.descriptorsHoldNoFolder(request)
        var unavailable: String?
        var plannedView: ViewPlan?
        if request.view == .private {
            // A folder the command is handed as a descriptor leads, by "..",
            // to the host's tree around it, which the view was to hide.
            guard descriptorsHoldNoFolder else {
                throw .usage("a descriptor the command starts with (stdin, stdout, stderr or a kept one) is a folder or an O_PATH "
                    + "descriptor: through it the command would see the host's tree around it, outside its private view; "
                    + "hand it a file, or run in the host view")
            }
            if !request.privateNamespaces {
                unavailable = "it needs the sandbox's own namespaces, which this request turned off (privateNamespaces)"
            } else {
                do {
                    var view = try ViewPlan(rules: systemPaths + folders)
                    if egress != nil {
                        for (path, content) in Self.egressFiles.sorted(by: { $0.key < $1.key }) { try view.addFile(String(path.dropFirst()), content: content) }
                    }
                    plannedView = view
                } catch { unavailable = error.reason }
            }
            // A staged grant never runs in the host view, where the command would find the folder itself,
            // nor an allowed-hosts list, where it would share the host's network.
            if let unavailable, request.compatibility == .hardRequirement || holdsStagedGrant || egress != nil {
                throw .viewUnavailable(unavailable + (holdsStagedGrant ? Self.stagedNeedsView : ""))
            }
        }
        viewPlan = plannedView
        viewUnavailable = unavailable
        LaunchPhases.mark("view planned")

        // The working directory is opened and checked once, and the child
        // changes into that very folder (fchdir), so a rename cannot redirect it.
        if let requested = request.workingDirectory {
            let folder: OwnedDescriptor
            do { folder = try .openPath(FilePath(requested), follow: true) } catch {
                throw error == .fileNameTooLong ? .workingDirectoryTooLong(FilePath(requested)) : .setup(step: "opening \(requested)", errno: error)
            }
            let reachable: Bool
            // Named as the user knows it: a staged grant by its folder (the clone is found at its path).
            do { reachable = try Ancestry.isBeneath(folder, anyOf: systemPaths.map(\.descriptor) + folders.map(\.descriptor)) } catch {
                throw .setup(step: "checking the working directory \(requested)", errno: error)
            }
            guard reachable, (try? folder.status().isDirectory) == true else {
                throw .workingDirectoryUnreachable(FilePath(requested))
            }
            workingDirectory = requested
            workingDirectoryDescriptor = folder
        } else {
            workingDirectory = container.root
            workingDirectoryDescriptor = containerFolder.descriptor
        }
        viewWorkingDirectory = FilePath.pathBytes(ofDescriptor: workingDirectoryDescriptor.rawValue) ?? Array(workingDirectory.utf8)
        executable = try Self.resolve(request.command[0], from: workingDirectoryDescriptor)
        let abi = min(features.landlockABI, Landlock.newestKnownABI)
        if abi >= 1 {
            do {
                reparenting = try ReparentingLayers(abi: abi, rules: systemPaths + folders)
            } catch {
                throw .setup(step: "building the Landlock layers that keep writable folders apart", errno: error)
            }
            ruleset = try Self.ruleset(
                abi: abi, policy: policy, folders: systemPaths + folders, refer: reparenting?.allowsRefer ?? false, egressPorts: egress?.commandPorts)
            restrictFlags = abi >= 7 ? CSB_LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON : 0
        } else {
            reparenting = nil
            ruleset = nil
            restrictFlags = 0
        }
        LaunchPhases.mark("Landlock ruleset")
        keeperScopesSignals = abi >= 6
        // The keeper's kill(-1) is denied for every host process: not worth an audit record each.
        keeperRestrictFlags = abi >= 7 ? CSB_LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF : 0
        superviseMetadata = features.seccompUserNotification
        denials = DenialReporter(terminal: request.explainDenials, log: request.denialLog, logBytes: request.denialLogBytes)
        if let log = request.denialLog { try DenialLog.check(log, against: systemPaths + folders) }
        if denials.explains {
            guard superviseMetadata, features.seccompFilter else {
                throw .explainUnsupported
            }
            observer = DenialObserver(
                rules: systemPaths + folders, policy: policy, containerRoot: container.root, reporter: denials, reparenting: reparenting)
        } else {
            observer = nil
        }
        if features.seccompFilter {
            var options = SyscallFilter.Options(
                networkClient: policy.networkClient || egress != nil, networkServer: policy.networkServer,
                extraSyscalls: policy.extraSyscalls, superviseMetadata: superviseMetadata)
            options.observeDenials = observer != nil
            options.ownNetwork = egress != nil
            // Folders may be taken away while the command runs (live grants,
            // or launch-time grants in the private view): watches are recorded.
            options.superviseWatches = servesLiveGrants || !request.folders.isEmpty
            // --explain needs to see every refusal: the supervisor's, not EROFS.
            readOnlyMounts = request.readOnlyMounts && request.privateNamespaces && observer == nil
                && Self.descriptorsAllowReadOnlyMounts(request) && Self.internalInodesRefuseSetattr
            options.readOnlyMounts = readOnlyMounts
            filterOptions = options
            let first = Self.options(options, view: viewPlan != nil ? .private : .host, descriptorsHoldNoFolder: descriptorsHoldNoFolder)
            filter = try SyscallFilter(options: first).compile()
            argumentGuard = try SyscallFilter(options: first).argumentGuard()
            LaunchPhases.mark("seccomp filters")
        } else {
            filter = nil
            argumentGuard = nil
            filterOptions = nil
            readOnlyMounts = false
        }
    }

    /// The main filter for a view and either way of enforcing metadata changes.
    func filter(view: FileSystemView, readOnlyMounts: Bool) throws(SandboxError) -> [UInt8]? {
        guard var options = filterOptions else { return nil }
        options.readOnlyMounts = readOnlyMounts
        options = Self.options(options, view: view, descriptorsHoldNoFolder: descriptorsHoldNoFolder)
        if options == Self.options(filterOptions!, view: viewPlan != nil ? .private : .host, descriptorsHoldNoFolder: descriptorsHoldNoFolder) {
            return filter
        }
        return try SyscallFilter(options: options).compile()
    }

    /// The filter's options in `view`: in the private view nothing outside
    /// what the sandbox may read exists, so attribute reads and watches
    /// run natively (unless a descriptor of a folder could lead outside).
    static func options(_ options: SyscallFilter.Options, view: FileSystemView, descriptorsHoldNoFolder: Bool) -> SyscallFilter.Options {
        var options = options
        options.nativeAttributeReads = view == .private && descriptorsHoldNoFolder
        // The view's own network namespace: no abstract name of the host's
        // is there, and the supervisor takes every connect.
        options.unixSockets = view == .private && (options.ownNetwork || !options.networkClient && !options.networkServer)
        return options
    }

    /// Whether every descriptor the command starts with (stdin, stdout,
    /// stderr, `--keep-fd`) is something other than a folder or an O_PATH
    /// descriptor: a path relative to one (`fstatat(fd, "..")`, or
    /// `/proc/self/fd/N/..`) reaches the host's tree around it.
    static func descriptorsHoldNoFolder(_ request: LaunchRequest) -> Bool {
        for fd in [request.standardInput, request.standardOutput, request.standardError] + request.keptDescriptors {
            var status = stat()
            let flags = fcntl(fd, F_GETFL)
            guard flags >= 0, flags & CSB_O_PATH == 0, fstat(fd, &status) == 0, !status.isDirectory else { return false }
        }
        return true
    }

    /// A root command owns the kernel's shared anonymous inodes; only a
    /// kernel that refuses to chmod them leaves nothing for read-only mounts
    /// to miss. Anyone else owns none of them.
    static let internalInodesRefuseSetattr = geteuid() != 0 || csb_internal_inodes_refuse_setattr() == 1

    /// How the command's stdin, stdout and stderr, and the descriptors it
    /// keeps, can stay under read-only mounts: none may be a file on one of
    /// the host's mounts, which chmod("/proc/self/fd/N") would reach
    /// whatever the namespace's mounts say.
    enum Handover: Equatable {
        /// A pipe or a socket: no mount at all.
        case asIs
        /// A terminal or memory device (/dev/null, /dev/pts/N): opened again
        /// by this name in the namespace, where its mount is read-only.
        case reopen([UInt8])
        /// A file, a folder, a named pipe, any other device or an O_PATH
        /// descriptor: the supervisor must stay in charge.
        case onHostMount
    }

    static func handover(of fd: CInt, reopenable: Bool) -> Handover {
        var status = stat()
        var fsid: UInt64 = 0
        var type: UInt64 = 0
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, flags & CSB_O_PATH == 0, fstat(fd, &status) == 0, csb_filesystem_identity(fd, &fsid, &type) == 0 else {
            return .onHostMount
        }
        switch status.st_mode & S_IFMT {
        case S_IFIFO where type == 0x5049_5045: return .asIs  // PIPEFS_MAGIC: not a named pipe
        case S_IFSOCK where type == 0x534F_434B: return .asIs  // SOCKFS_MAGIC: not a socket's file
        case S_IFCHR where reopenable:
            // Opening again must do nothing else: memory devices and ptys only
            // (a tape or a modem acts on open).
            let major = (status.st_rdev >> 8) & 0xFFF
            guard major == 1 || (136...143).contains(major), let path = FilePath.pathBytes(ofDescriptor: fd) else { return .onHostMount }
            return .reopen(path)
        default: return .onHostMount
        }
    }

    /// Before the relay exists: a terminal it will replace by its pty counts as reopened.
    static func descriptorsAllowReadOnlyMounts(_ request: LaunchRequest) -> Bool {
        let stdio = [request.standardInput, request.standardOutput, request.standardError]
        let relayed = request.terminal == .automatic && stdio.contains { isatty($0) == 1 }
        for fd in stdio where !(relayed && isatty(fd) == 1) {
            if handover(of: fd, reopenable: true) == .onHostMount { return false }
        }
        return request.keptDescriptors.allSatisfy { $0 <= 2 || handover(of: $0, reopenable: false) == .asIs }
    }

    /// Opens a folder the user named (following symlinks: they are the user's),
    /// as O_PATH; anything but a folder is refused with a usage error.
    public static func openFolder(_ path: String) throws(SandboxError) -> OwnedDescriptor {
        try openFolder(FilePath(path))
    }

    /// The same, for a path given as bytes.
    public static func openFolder(_ path: FilePath) throws(SandboxError) -> OwnedDescriptor {
        do { return try .openFolder(path, follow: true) } catch {
            throw .usage("\(Printable.path(path)): \(error == .noSuchFileOrDirectory ? "no such folder" : error == .notDirectory ? "not a folder" : error.description)")
        }
    }

    /// Opens a folder as O_PATH, following symlinks: the fd is what gets verified and ruled.
    static func openVerified(_ path: String) throws(SandboxError) -> OwnedDescriptor {
        do {
            return try .openPath(FilePath(path), follow: true)
        } catch {
            throw .setup(step: "opening \(path)", errno: error)
        }
    }

    /// The policy's system paths that exist here, opened once: the same fds
    /// get the Landlock rules and pin the supervisor's readable roots.
    /// Each is opened as its folder (once per folder: sixty /etc files open
    /// /etc once) and then its last name without following a link, so that
    /// the protected-folder check knows the folder of each file without
    /// asking /proc for its name; a last name that is a link is opened
    /// through, as the path says.
    private static func openSystemPaths(_ policy: Policy) -> [PathRule] {
        // A short list, not a dictionary: a new key type costs the runtime a
        // scan of every protocol conformance in the binary, at every launch.
        var folders: [(path: Substring, descriptor: OwnedDescriptor?)] = []
        return policy.systemPaths.compactMap { systemPath in
            let path = systemPath.path
            let rule = { (fd: CInt, folder: OwnedDescriptor?, inode: Ancestry.Inode?) in
                PathRule(origin: .system, path: FilePath(path), descriptor: OwnedDescriptor(taking: fd), access: systemPath.access, folder: folder, inode: inode)
            }
            // A path this system lacks (say /lib64 on arm64) only means less access.
            guard let slash = path.lastIndex(of: "/"), path.index(after: slash) < path.endIndex, slash != path.startIndex else {
                return (try? syscallRetrying { csb_open_path(AT_FDCWD, path, 1) }).map { rule($0, nil, nil) }
            }
            let folderPath = path[..<slash]
            if !folders.contains(where: { $0.path == folderPath }) {
                folders.append((folderPath, (try? syscallRetrying { csb_open_path(AT_FDCWD, String(folderPath), 1) }).map(OwnedDescriptor.init(taking:))))
            }
            guard let folder = folders.first(where: { $0.path == folderPath })?.descriptor,
                  let leaf = try? syscallRetrying({ csb_open_path(folder.rawValue, String(path[path.index(after: slash)...]), 0) })
            else { return nil }
            var status = stat()
            guard fstat(leaf, &status) == 0, status.st_mode & S_IFMT != S_IFLNK else {
                close(leaf)
                return (try? syscallRetrying { csb_open_path(AT_FDCWD, path, 1) }).map { rule($0, nil, nil) }
            }
            return rule(leaf, status.isDirectory ? nil : folder, Ancestry.Inode(status))
        }
    }

    /// `refer`: whether the writable folders allow REFER (see `ReparentingLayers`);
    /// none where the layers cannot keep folders apart.
    /// `egressPorts`: with an allowed-hosts list, the only ports the command
    /// may connect to (the proxy's and the captured ones on its loopback).
    private static func ruleset(abi: Int, policy: Policy, folders: [PathRule], refer: Bool, egressPorts: [UInt16]?) throws(SandboxError)
        -> LandlockRuleset
    {
        var network: Landlock.NetworkAccess = []
        if abi >= 4 {
            if !policy.networkClient || policy.tcpConnectPorts != nil || egressPorts != nil { network.insert(.connectTCP) }
            if !policy.networkServer || policy.tcpBindPorts != nil { network.insert(.bindTCP) }
        }
        let scope: Landlock.Scope = abi >= 6 ? [.abstractUnixSocket, .signal] : []
        do {
            let ruleset = try LandlockRuleset(files: .handled(byABI: abi), network: network, scope: scope)
            for folder in folders {
                try ruleset.allow(policy.landlockAccess(for: folder).subtracting(refer ? [] : .refer), beneath: folder.exposed)
            }
            if network.contains(.connectTCP) {
                for port in egressPorts ?? policy.tcpConnectPorts ?? [] { try ruleset.allow(.connectTCP, port: port) }
            }
            if network.contains(.bindTCP) {
                for port in policy.tcpBindPorts ?? [] { try ruleset.allow(.bindTCP, port: port) }
            }
            return ruleset
        } catch {
            throw .setup(step: "building the Landlock ruleset", errno: error)
        }
    }

    /// What the command's layer allows in the private view's /tmp: a grant's
    /// rights (it holds the binds of folders that lie in the host's /tmp,
    /// and Landlock grants each the union of the rules above it).
    static func temporaryRights(policy: Policy, refer: Bool) -> Landlock.FileAccess {
        var rights = Landlock.FileAccess.readWrite.subtracting(policy.symbolicLinks ? [] : .makeSym).subtracting(refer ? [] : .refer)
        if policy.executeFiles { rights.insert(.execute) }
        return rights
    }

    /// A path as given (a relative one is found from the command's working
    /// directory, as the child will exec it), or a name looked up in the sandbox's PATH.
    private static func resolve(_ name: String, from workingDirectory: OwnedDescriptor) throws(SandboxError) -> String {
        if name.contains("/") {
            guard faccessat(workingDirectory.rawValue, name, F_OK, 0) == 0 else { throw .notFound(command: name) }
            return name
        }
        var found: String?
        for folder in sandboxPath.split(separator: ":") {
            let candidate = "\(folder)/\(name)"
            if access(candidate, X_OK) == 0 { return candidate }
            if found == nil, access(candidate, F_OK) == 0 { found = candidate }
        }
        guard let found else { throw .notFound(command: name) }
        return found  // exists but is not executable: execve reports why
    }

    /// Refuses a grant (or a container) in /dev or /proc: the sandbox has its
    /// own there, which would hide the folder, and what the command wrote in
    /// its place would be lost with the sandbox.
    private static func checkNothingReplaced(_ folders: [PathRule]) throws(SandboxError) {
        let mounts = KernelInterfaces.mounts()  // once for every folder
        for rule in folders {
            guard let real = FilePath.pathBytes(ofDescriptor: rule.descriptor.rawValue) else { continue }
            // Nor a kernel interface (procfs, sysfs...), or a folder holding one.
            if let exposed = KernelInterfaces.exposed(by: rule.descriptor.rawValue, path: real, mounts: .some(mounts)) {
                let place = "'\(Printable.path(bytes: real))': " + (exposed.path == real ? "it is" : "\(Printable.path(bytes: exposed.path)) beneath it is")
                    + " the kernel's \(exposed.type), not data (a command there could read every process, and as root change the kernel's settings)"
                if let name = rule.grantName { throw .usage("grant \(name): \(place): grant a folder of files") }
                throw .usage("the app's container: \(place): keep containers elsewhere")
            }
            for own in ["/dev", "/proc"].map({ Array($0.utf8) }) where real == own || real.starts(with: own + [UInt8(ascii: "/")]) {
                let place = "'\(Printable.path(bytes: real))' lies in \(String(decoding: own, as: UTF8.self)), where the sandbox has its own "
                    + "(the command would not see this folder, and what it wrote there would be lost)"
                if let name = rule.grantName { throw .usage("grant \(name): \(place): grant a folder elsewhere") }
                throw .usage("the app's container: \(place): keep containers elsewhere")
            }
        }
    }

    /// Refuses a system path or grant that holds, or lies inside, the broker's
    /// state or the app containers: it would hand the sandbox the keys, the
    /// ledger or other apps' data. Compared by inode, as Landlock applies rules.
    private static func checkNothingProtected(
        systemPaths: [PathRule], grants: [PathRule], policy: Policy, protected: [String]
    ) throws(SandboxError) {
        let rules = systemPaths + grants
        let guarded = protected.map { path in (try? syscallRetrying { csb_open_path(AT_FDCWD, path, 1) }).map(OwnedDescriptor.init(taking:)) }
        switch Ancestry.firstOverlap(of: rules.map { ($0.descriptor, $0.folder, $0.inode) }, among: guarded) {
        case nil:
            return
        case .unproven(let item, let place, let error)?:
            let rule = rules[item]
            // The walk's own failure, said as such: a folder this user may not search (mode 000) cannot be walked up from.
            var reason = error
            do { _ = try Ancestry.isBeneath(rule.descriptor, anyOf: []) } catch { reason = error }
            let problem = "whether '\(Printable.path(rule.path))' holds or lies inside sandboxed-run's own \(Printable.path(protected[place])) "
                + "could not be checked, because the folders above it could not be walked from it (\(reason))"
            if rule.grantName != nil {
                throw .usage("\(rule.shownName): \(problem): let this user search it (chmod u+x), or pick another folder")
            }
            throw .setup(step: problem, errno: reason)
        case .overlap(let item, let place)?:
            let rule = rules[item]
            let problem = "'\(Printable.path(rule.path))' would expose sandboxed-run's own \(Printable.path(protected[place])) "
                + "(the broker's keys and ledger, or the app containers) to the sandbox"
            if rule.grantName != nil {
                throw .usage("\(rule.shownName): \(problem): grant a folder that neither holds nor lies inside it")
            }
            let key = "org.sandboxed-run.system-paths.\(rule.access.rawValue)"
            throw .policy(PolicyError(file: policy.source, key: key, problem: problem + ": list narrower paths"))
        }
    }

    /// Why a launch with a staged grant stops rather than run in the host view.
    static let stagedNeedsView = "; a staged grant needs the private view (the host view would show the command the folder itself), "
        + "so this launch does not run in the host view"

    /// Staged grants: the host view cannot put a clone in a folder's place,
    /// and each clone must be a folder apart from its granted folder (the
    /// command would change the folder through it, or see its clone) and
    /// from every protected folder but the one it lies in: it may hold
    /// none, nor lie among the app containers.
    private static func checkStaged(_ grants: [PathRule], view: FileSystemView, containerBase: String, protected: [String]) throws(SandboxError) {
        let staged = grants.filter { $0.staged != nil }
        if view == .host, let first = staged.first {
            throw .usage("\(first.shownName): a staged grant needs the private view, which puts its clone in the folder's place "
                + "(the host view would show the command the folder itself): run it with --view private")
        }
        let guarded = ([containerBase] + protected).map { path in (try? syscallRetrying { csb_open_path(AT_FDCWD, path, 1) }).map(OwnedDescriptor.init(taking:)) }
        var guardedChains: [[InodeIdentity]?] = []
        for folder in guarded {
            guard let folder else { guardedChains.append(nil); continue }
            do { guardedChains.append(try Ancestry.chain(of: folder)) } catch { throw .setup(step: "checking where the staged grants' clones lie", errno: error) }
        }
        for rule in staged {
            guard let clone = rule.staged else { continue }
            guard (try? rule.descriptor.status())?.isDirectory == true, (try? clone.status())?.isDirectory == true else {
                throw .usage("\(rule.shownName): only a folder can be staged, into a folder (its clone)")
            }
            let cloneChain: [InodeIdentity], folderChain: [InodeIdentity]
            do {
                cloneChain = try Ancestry.chain(of: clone)
                folderChain = try Ancestry.chain(of: rule.descriptor)
            } catch {
                throw .setup(step: "checking where the clone of \(rule.shownName) lies", errno: error)
            }
            if Ancestry.overlaps(cloneChain, folderChain) {
                throw .usage("\(rule.shownName): its clone and '\(Printable.path(rule.path))' lie one in the other: the clone must be a folder apart")
            }
            for (index, chain) in guardedChains.enumerated() {
                guard let chain else { continue }
                // The containers (index 0): neither in nor around them. Any other: not around it.
                if chain.contains(cloneChain[0]) || (index == 0 && cloneChain.contains(chain[0])) {
                    let place = index == 0 ? containerBase : protected[index - 1]
                    throw .usage("\(rule.shownName): its clone would expose sandboxed-run's own \(Printable.path(place)) to the sandbox")
                }
            }
        }
    }

    private static func environment(
        for request: LaunchRequest, container: AppContainer, launcher: FilePath?
    ) throws(SandboxError) -> [[UInt8]] {
        // Name and value pairs, a later one replacing an earlier one of the
        // same name. A list, not a dictionary: a dictionary of a new type
        // costs the runtime a scan of every conformance in the binary.
        var variables: [(key: String, value: [UInt8])] = []
        func set(_ name: String, _ value: [UInt8]) {
            if let index = variables.firstIndex(where: { $0.key == name }) { variables[index].value = value } else { variables.append((name, value)) }
        }
        set("PATH", Array(sandboxPath.utf8))
        set("LANG", Array((request.hostEnvironment["LANG"] ?? "C.UTF-8").utf8))
        set("HOME", Array(container.root.utf8))
        set("TMPDIR", Array(container.temporary.utf8))
        set("SANDBOX_APP_ID", Array(request.app.rawValue.utf8))
        if let hosts = request.policy.allowedHosts {
            for (name, value) in EgressPlan(hosts: AllowedHosts(hosts)).environment { set(name, Array(value.utf8)) }
        }
        set("SANDBOX_CONTAINER", Array(container.root.utf8))
        if let term = request.hostEnvironment["TERM"] { set("TERM", Array(term.utf8)) }
        if let launcher { set("SANDBOXED_RUN", launcher.bytes) }
        for name in request.keptEnvironment {
            try validate(name)
            if let value = request.hostEnvironment[name] { set(name, Array(value.utf8)) }
        }
        for (name, value) in request.environment {
            try validate(name)
            set(name, Array(value.utf8))
        }
        for (name, path) in request.pathVariables {
            try validate(name)
            set(name, path.bytes)
        }
        return variables.sorted { $0.key < $1.key }.map { Array("\($0.key)=".utf8) + $0.value }

        func validate(_ name: String) throws(SandboxError) {
            guard !name.isEmpty, !name.contains("="), !name.contains("\0") else {
                throw .usage("invalid environment variable name '\(name)': it must be non-empty and contain no '='")
            }
        }
    }

}

/// The launcher's executable, and the libraries it loaded from outside the
/// usual system paths (a debug build's Swift runtime): what the sandbox
/// needs to run `$SANDBOXED_RUN append`. Read and execute on these files only.
struct LauncherFiles {
    let executable: FilePath
    let rules: [PathRule]

    static var current: LauncherFiles? {
        // A launcher deleted since it started has no name to give the sandbox.
        guard let name = FilePath.kernelName(Array("/proc/self/exe".utf8)) else { return nil }
        let executable = FilePath(bytes: name)
        // The loader's list of what it mapped: no /proc/self/maps to read and parse.
        var loaded: [FilePath] = []
        withUnsafeMutablePointer(to: &loaded) { list in
            csb_loaded_objects({ path, context in
                guard let context else { return }
                context.assumingMemoryBound(to: [FilePath].self).pointee.append(FilePath(platformString: path))
            }, list)
        }
        var paths = [executable]
        for path in loaded where path.bytes.first == UInt8(ascii: "/") {
            let covered = ["/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/"].contains { path.bytes.starts(with: Array($0.utf8)) }
            if !covered, !paths.contains(path) { paths.append(path) }
        }
        let rules = paths.compactMap { path -> PathRule? in
            // The executable's rule binds to the inode the kernel runs, not to what its name leads to now.
            let opened = path == executable ? FilePath("/proc/self/exe") : path
            guard let fd = try? OwnedDescriptor.openPath(opened, follow: true), (try? fd.status())?.isRegularFile == true else { return nil }
            return PathRule(origin: .launcher, path: path, descriptor: fd, access: .readExecute)
        }
        return LauncherFiles(executable: executable, rules: rules)
    }
}
