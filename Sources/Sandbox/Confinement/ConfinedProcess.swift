@preconcurrency import Glibc
import CLaunch
import CSyscalls
import SystemPackage

extension ConfinementPlan {
    /// Forks the keeper, which starts the child that applies the plan and
    /// execs. Returns once the exec succeeded; a failure before it is
    /// reported as a `SandboxError`. Where the private view cannot be built
    /// (the kernel refuses the namespaces or a mount in them), the launch
    /// stops with `.viewUnavailable`, or under best effort runs in the host
    /// view (`ConfinedProcess.viewNotice` says why), never with a staged grant.
    public func launch() throws(SandboxError) -> ConfinedProcess {
        // What runs with this launch is made here, not in the plan: a plan
        // stays a value that may be launched again (each launch gets its own
        // broker socket and its own record of what can be taken away).
        let runtime = Runtime(broker: servesLiveGrants ? try LiveGrantBroker() : nil, running: RunningGrants())
        let kept = request.keptDescriptors.filter { $0 > 2 } + (runtime.broker?.commandDescriptor.map { [$0] } ?? [])
        let layout = request.terminal == .automatic
            ? TerminalRelay.Layout(standardInput: request.standardInput, standardOutput: request.standardOutput, standardError: request.standardError)
            : nil
        var view: FileSystemView = viewPlan != nil ? .private : .host
        var notice = viewUnavailable
        while true {
            switch try attempt(view: view, layout: layout, kept: kept, runtime: runtime) {
            case .started(let process):
                process.viewNotice = notice
                if let broker = runtime.broker {
                    broker.commandStarted()
                    process.liveGrants = broker
                }
                process.running = runtime.running
                return process
            case .viewUnavailable(let reason):
                guard view == .private, request.compatibility == .bestEffort, !holdsStagedGrant else {
                    throw .viewUnavailable(reason + (holdsStagedGrant ? Self.stagedNeedsView : ""))
                }
                notice = reason
                view = .host
            case .readOnlyRefused, .namespacesRefused:
                throw .setup(step: "starting the command", errno: .noSuchProcess)  // `attempt` retries these itself
            }
        }
    }

    /// One launch's own objects: the broker's socket, and what of its grants can be taken away.
    struct Runtime {
        let broker: LiveGrantBroker?
        let running: RunningGrants

        /// The command's environment: the plan's, and the broker's descriptor
        /// number, which is this launch's (it replaces any value given for it).
        func environment(_ planned: [[UInt8]]) -> [[UInt8]] {
            guard let number = broker?.commandDescriptor else { return planned }
            let name = Array("\(ConfinementPlan.brokerVariable)=".utf8)
            return planned.filter { !$0.starts(with: name) } + [name + Array(String(number).utf8)]
        }
    }

    private enum Attempt {
        case started(ConfinedProcess)
        case viewUnavailable(String)
        /// The read-only mounts could not be made (or a descriptor not
        /// opened again), before the command started: try supervised.
        case readOnlyRefused
        /// The kernel let the keeper into new namespaces but refused it a
        /// step there (an id map, a mount: a security module that restricts
        /// user namespaces), before the command started.
        case namespacesRefused
    }

    /// A launch in `view`: under read-only mounts when the descriptors allow
    /// them, else (or when the kernel refused them) supervised; in the host
    /// view, without namespaces when the kernel refused what the keeper
    /// does in them (then the command has no /proc and no /dev/shm).
    private func attempt(view: FileSystemView, layout: TerminalRelay.Layout?, kept: [CInt], runtime: Runtime) throws(SandboxError) -> Attempt {
        // The host view's pty is opened here; the private view's by the
        // keeper, in the sandbox's own devpts (the slots keep the user's
        // terminal until the keeper puts its pty there).
        let relay: TerminalRelay? = view == .host ? try layout.map { layout throws(SandboxError) in try TerminalRelay(layout: layout) } : nil
        let ptySlots: CInt = view == .private ? layout?.slots ?? 0 : 0
        let stdio = relay?.commandStandardIO ?? (request.standardInput, request.standardOutput, request.standardError)
        // Read-only mounts only when no descriptor of the command is a file
        // on the host's mounts (see `Handover`); the ones the relay made, or
        // the memory devices, are opened again in the namespace.
        var reopen: [[UInt8]?]? = readOnlyMounts ? [] : nil
        for (slot, fd) in [stdio.0, stdio.1, stdio.2].enumerated() where reopen != nil {
            if ptySlots & (1 << CInt(slot)) != 0 {
                reopen?.append(nil)
                continue
            }
            switch Self.handover(of: fd, reopenable: true) {
            case .asIs: reopen?.append(nil)
            case .reopen(let path): reopen?.append(path)
            case .onHostMount: reopen = nil
            }
        }
        if kept.contains(where: { Self.handover(of: $0, reopenable: false) != .asIs }) { reopen = nil }
        var namespaces = request.privateNamespaces
        var outcome: Attempt = .readOnlyRefused
        if let reopen {
            outcome = try launch(view: view, namespaces: namespaces, stdio: stdio, kept: kept, relay: relay, layout: layout, reopen: reopen, runtime: runtime)
        }
        // Refused before the command started (no namespaces, a mount the
        // kernel would not make read-only, a device not found again): the
        // supervisor decides every metadata change instead.
        if case .readOnlyRefused = outcome {
            outcome = try launch(view: view, namespaces: namespaces, stdio: stdio, kept: kept, relay: relay, layout: layout, reopen: nil, runtime: runtime)
        }
        if case .namespacesRefused = outcome, view == .host, namespaces {
            namespaces = false
            outcome = try launch(view: view, namespaces: namespaces, stdio: stdio, kept: kept, relay: relay, layout: layout, reopen: nil, runtime: runtime)
        }
        switch outcome {
        case .started, .viewUnavailable: return outcome
        case .readOnlyRefused, .namespacesRefused: throw .setup(step: "starting the command", errno: .noSuchProcess)
        }
    }

    /// The policy's limits for the child. `nproc` counts from the user's
    /// processes and threads now: the kernel counts every one of the real
    /// uid's, so a fixed number could stop a user who already runs many.
    /// The kernel never applies RLIMIT_NPROC to uid 0: no count for root.
    static func resourceLimits(_ policy: Policy) -> [csb_rlimit] {
        policy.limits.sorted { $0.key < $1.key }.map { limit, value in
            let counted = limit == .nproc && getuid() != 0
            let (total, overflow) = counted ? value.addingReportingOverflow(tasksOfUser(getuid())) : (value, false)
            // `core 0` means no dump. Where the kernel pipes dumps to a helper
            // (kernel.core_pattern "|..."), only a limit of 1 stops it from
            // starting that helper, as root, on the command's memory.
            if limit == .core, value == 0, corePatternIsPipe() { return csb_rlimit(resource: limit.resource, value: 1) }
            return csb_rlimit(resource: limit.resource, value: overflow ? .max : total)
        }
    }

    static func corePatternIsPipe() -> Bool {
        let fd = open("/proc/sys/kernel/core_pattern", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return true }  // unknown: assume the helper
        defer { close(fd) }
        var first: UInt8 = 0
        return read(fd, &first, 1) != 1 || first == UInt8(ascii: "|")
    }

    /// Processes and threads whose /proc entry `uid` owns (the owner is the
    /// effective uid, the kernel counts by real uid: close enough for a base).
    static func tasksOfUser(_ uid: uid_t) -> UInt64 {
        let proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard proc >= 0 else { return 0 }
        guard let directory = fdopendir(proc) else {
            close(proc)
            return 0
        }
        defer { closedir(directory) }
        var count: UInt64 = 0
        while let entry = readdir(directory) {
            let isPID = withUnsafeBytes(of: entry.pointee.d_name) { name in
                name.first.map { (UInt8(ascii: "1")...UInt8(ascii: "9")).contains($0) } ?? false
            }
            guard isPID else { continue }
            count += withUnsafeBytes(of: entry.pointee.d_name) { name -> UInt64 in
                let base = name.baseAddress!.assumingMemoryBound(to: CChar.self)
                var status = stat()
                guard fstatat(proc, base, &status, 0) == 0, status.st_uid == uid else { return 0 }
                guard fstatat(proc, String(cString: base) + "/task", &status, 0) == 0, status.st_nlink > 2 else { return 1 }
                return UInt64(status.st_nlink - 2)
            }
        }
        return count
    }

    /// One launch: with `reopen`, under read-only mounts, else supervised.
    private func launch(
        view: FileSystemView, namespaces withNamespaces: Bool, stdio: (CInt, CInt, CInt), kept: [CInt], relay hostRelay: TerminalRelay?,
        layout: TerminalRelay.Layout?, reopen: [[UInt8]?]?, runtime: Runtime
    ) throws(SandboxError) -> Attempt {
        let running = runtime.running
        let readOnly = reopen != nil
        let privateView = view == .private ? viewPlan : nil
        var keeperPID: pid_t = 0
        var pidfd: CInt = -1
        var reportFD: CInt = -1
        // The keeper is a fork: it reads its own copy of everything below.
        let filter = try filter(view: view, readOnlyMounts: readOnly)
        let ptySlots: CInt = privateView != nil ? layout?.slots ?? 0 : 0
        // The grant area: in the private view, when the launch can attach
        // folders (`LiveGrantSupport.attach`). Its helper comes later, when used.
        let grantArea = privateView != nil && request.liveGrants == .attach && runtime.broker != nil
        let image = LaunchImage()
        var aheadNetwork: OwnedDescriptor?
        image.planChild { plan, image in
            plan.path = image.string(executable)
            plan.argv = image.strings(arguments.map { Array($0.utf8) })
            plan.envp = image.strings(runtime.environment(environment))
            plan.working_directory = privateView != nil ? image.string(viewWorkingDirectory) : image.string(workingDirectory)
            plan.working_directory_fd = workingDirectoryDescriptor.rawValue
            plan.stdio = stdio
            plan.kept_fds = image.array(kept)
            plan.kept_fds_count = CInt(kept.count)
            plan.ruleset_fd = ruleset?.descriptor.rawValue ?? -1
            plan.restrict_flags = restrictFlags
            let layers = (reparenting?.layers ?? []).map(\.descriptor.rawValue)
            plan.refer_rulesets = image.array(layers)
            plan.refer_rulesets_count = CInt(layers.count)
            plan.seccomp_filter = image.bytes(filter)
            plan.seccomp_filter_length = UInt16((filter?.count ?? 0) / 8)
            plan.seccomp_guard = image.bytes(argumentGuard)
            plan.seccomp_guard_length = UInt16((argumentGuard?.count ?? 0) / 8)
            plan.seccomp_listener = (filter != nil && superviseMetadata) ? 1 : 0
            plan.drop_capabilities = Capabilities.canDropBoundingSet ? 1 : 0
            plan.last_capability = Capabilities.lastCapability
            plan.new_session = 1
            plan.die_with_parent = request.dieWithParent ? 1 : 0
            plan.controlling_terminal = hostRelay?.controllingTerminal ?? (ptySlots != 0 ? CInt(layout?.first ?? 0) : -1)
            if let reopen {
                plan.stdio_reopen = (reopen[0].map { image.string($0) }, reopen[1].map { image.string($0) }, reopen[2].map { image.string($0) })
            }
            let limits = Self.resourceLimits(request.policy)
            plan.rlimits = image.array(limits)
            plan.rlimits_count = CInt(limits.count)
        }
        image.planKeeper { keeper, image in
            keeper.scope_signals = keeperScopesSignals ? 1 : 0
            keeper.scope_restrict_flags = keeperRestrictFlags
            keeper.kill_when_launcher_exits = request.dieWithParent ? 1 : 0
            keeper.private_namespaces = withNamespaces ? 1 : 0
            keeper.user_namespace_allowed = 1
            keeper.uid = geteuid()
            keeper.gid = getegid()
            keeper.proc_access = ruleset?.rights(.readOnly).rawValue ?? 0
            keeper.shm_access = ruleset?.rights(.readWrite).rawValue ?? 0
            keeper.shm_size = Self.sharedMemorySize
            keeper.tmp_size = Self.temporarySize
            keeper.tmp_inodes = Self.temporaryFiles
            keeper.read_only_mounts = readOnly ? 1 : 0
            if let privateView {
                keeper.private_view = 1
                keeper.private_network = privateNetwork ? 1 : 0
                if privateNetwork, let namespace = networkAhead?.take() {
                    // Open until the keeper is forked (spawn below), which joins it.
                    aheadNetwork = namespace
                    keeper.has_network_namespace = 1
                    keeper.network_namespace_fd = namespace.rawValue
                }
                if privateNetwork, let egress {
                    let listeners = egress.listeners.map { planned in
                        csb_egress_listener(
                            address: planned.address.withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }, port: planned.port,
                            datagram: planned.isDatagram ? 1 : 0)
                    }
                    keeper.egress_listeners = image.array(listeners)
                    keeper.egress_listeners_count = CInt(listeners.count)
                }
                privateView.apply(to: &keeper, image: image)
                keeper.tmp_access = ruleset?.rights(Self.temporaryRights(policy: request.policy, refer: reparenting?.allowsRefer ?? false)).rawValue ?? 0
                keeper.terminal_access = ruleset?.rights([.readFile, .writeFile, .readDir, .ioctlDev]).rawValue ?? 0
                keeper.pty_slots = ptySlots
                if grantArea {
                    keeper.grant_area = 1
                    keeper.grant_area_access = ruleset?.rights(Self.grantAreaRights(policy: request.policy, refer: reparenting?.allowsRefer ?? false)).rawValue ?? 0
                }
                if ptySlots != 0 {
                    keeper.pty_modes = layout?.modes.map { modes in UnsafeRawPointer(image.array([modes])!) }
                    keeper.pty_window = layout?.window.map { size in UnsafeRawPointer(image.array([size])!) }
                }
            } else if readOnly {
                keeper.writable_paths = UnsafeRawPointer(image.strings(writablePaths.map(\.bytes)))
                    .assumingMemoryBound(to: UnsafePointer<CChar>?.self)
                keeper.writable_fds = image.array(writableRoots.map(\.rawValue))
                keeper.writable_count = CInt(writableRoots.count)
            }
        }
        let spawned = image.spawn(keeperPID: &keeperPID, pidfd: &pidfd, report: &reportFD)
        withExtendedLifetime(aheadNetwork) {}  // the keeper has its copy now
        LaunchPhases.mark("keeper forked")
        if spawned == CSB_SPAWN_NO_NAMESPACES {
            if privateView != nil {
                return .viewUnavailable("the kernel refused the sandbox's namespaces (clone: \(Errno(rawValue: errno).description))")
            }
            return .readOnlyRefused
        }
        guard spawned == 0 else { throw .setup(step: "fork", errno: Errno(rawValue: errno)) }
        let keeper = Keeper(
            pid: keeperPID, pidfd: OwnedDescriptor(taking: pidfd), report: OwnedDescriptor(taking: reportFD),
            endsWithLauncher: request.dieWithParent)

        var listener: OwnedDescriptor?
        var namespaces = ConfinedProcess.Namespaces()
        var relay = hostRelay
        var ptyMaster: OwnedDescriptor?
        var area: OwnedDescriptor?, areaView: OwnedDescriptor?
        var launchMounts: [(grants: [String], mount: OwnedDescriptor)] = []
        var egressSockets: [OwnedDescriptor?] = Array(repeating: nil, count: egress?.listeners.count ?? 0)
        var gateway: EgressGateway?
        var started = false
        defer { if !started { gateway?.stop() } }  // a launch that fails after the proxy was served
        let revocable = privateView?.revocableBinds ?? []
        let supervisor = MetadataSupervisor(writableRoots: writableRoots, readableRoots: readableRoots)
        // The filter sends watches to it (`SyscallFilter.Options.superviseWatches`): each is recorded.
        supervisor.recordWatches = privateView != nil && filterOptions?.superviseWatches == true
        supervisor.reporter = denials
        supervisor.connectsInternetInOwnNetwork = egress != nil
        supervisor.observer = observer
        observer?.paths = supervisor.paths  // one resolver: both judge what the command's call reached
        while true {
            // The observer sees the command's own execve: serve it while waiting.
            if observer != nil, let listener {
                var fds = [pollfd(fd: keeper.report.rawValue, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: listener.rawValue, events: Int16(POLLIN), revents: 0)]
                if poll(&fds, 2, -1) < 0 { continue }  // EINTR
                if fds[1].revents & Int16(POLLIN) != 0 { supervisor.serveOne(listener: listener) }
                if fds[0].revents == 0 { continue }
            }
            let message: Keeper.Message
            do {
                message = try keeper.next()
            } catch {
                keeper.abandon()
                throw .setup(step: "reading the child's report", errno: error)
            }
            switch message {
            case .running(let pid):
                LaunchPhases.mark("command started")
                // The sockets exist in the sandbox's namespace: served, or the command is ended.
                if egress != nil, namespaces.contains(.network), gateway == nil {
                    keeper.abandon()
                    throw .setup(step: "receiving the network proxy's sockets", errno: .protocolError)
                }
                let process = ConfinedProcess(
                    pid: pid, keeper: keeper, listener: listener, relay: relay, namespaces: namespaces, view: view, supervisor: supervisor,
                    report: report)
                // The helper's client, for the area and the launch-time grants'
                // mounts; nil (nothing is attached or detached: answered
                // `unavailable`) only when out of descriptors.
                process.gateway = gateway
                started = true
                running.launchMounts = launchMounts
                running.area = namespaces.contains(.view) && (area != nil && areaView != nil || !launchMounts.isEmpty)
                    ? LiveGrantArea(
                        keeper: keeper.pidfd, userNamespace: namespaces.contains(.user), area: area, areaView: areaView,
                        executeAllowed: request.policy.executeFiles)
                    : nil
                runtime.broker?.area = running.area?.canAttach == true ? running.area : nil
                if let areaView, namespaces.contains(.view) { supervisor.addReadableRoot(areaView) }
                if supervisor.recordWatches { running.watchForgetter = { [supervisor] folder in supervisor.forgetWatches(beneath: folder) } }
                return .started(process)
            case .listener(let fd):
                LaunchPhases.mark("child confined")
                listener = fd
            case .ptyMaster(let fd):
                ptyMaster = fd
            case .egress(let index, let fd):
                guard let egress, egressSockets.indices.contains(Int(index)), egressSockets[Int(index)] == nil else {
                    keeper.abandon()
                    throw .setup(step: "receiving the network proxy's sockets", errno: .protocolError)
                }
                egressSockets[Int(index)] = fd
                // Served as soon as the last arrives, while the keeper goes on confining the command.
                guard egressSockets.allSatisfy({ $0 != nil }) else { continue }
                do {
                    gateway = try EgressGateway(
                        plan: egress, sockets: egressSockets.map { $0!.release() }, resolver: request.egressResolver ?? .system,
                        refused: { [denials] refusal in denials.record(Denial(refusal)) })
                } catch {
                    keeper.abandon()
                    throw .setup(step: error.description, errno: .protocolError)
                }
                LaunchPhases.mark("network proxy served")
            case .grantArea(let which, let fd):
                if which == 0 { area = fd } else { areaView = fd }
            case .viewGrant(let step, let fd):
                guard let grants = revocable.first(where: { $0.step == Int(step) })?.grants else {
                    keeper.abandon()
                    throw .setup(step: "receiving a grant's mount in the view", errno: .protocolError)
                }
                launchMounts.append((grants, fd))
            case .ptyTerminal(let fd):
                guard let master = ptyMaster, let layout else {
                    keeper.abandon()
                    throw .setup(step: "receiving the command's pty", errno: .protocolError)
                }
                relay = try TerminalRelay(layout: layout, master: master, terminal: fd)
                ptyMaster = nil
            case .namespaces(let bits):
                namespaces = ConfinedProcess.Namespaces(rawValue: bits)
                // The sandbox's own mounts; in the host view, the launcher's
                // at those paths name nothing the command can see.
                var own = (namespaces.contains(.proc) ? ["/proc"] : []) + (namespaces.contains(.sharedMemory) ? ["/dev/shm"] : [])
                let shadowed = namespaces.contains(.view) ? [] : own
                if namespaces.contains(.view) { own.append("/tmp") }
                if namespaces.contains(.pidAndMount) { supervisor.enterNamespace(of: keeper.pid, shadowed: shadowed, own: own) }
                observer?.enterNamespace(
                    privateMounts: own, view: namespaces.contains(.view), ownFiles: egress != nil ? Array(Self.egressFiles.keys) : [])
                LaunchPhases.mark("namespaces ready")
            case .failed(let stage, let error, let value):
                keeper.abandon()
                if readOnly, stage == CSB_KEEPER_READ_ONLY_MOUNTS.rawValue || stage == CSB_STAGE_REOPEN.rawValue { return .readOnlyRefused }
                let namespaceStep = stage == CSB_KEEPER_ID_MAP.rawValue || stage == CSB_KEEPER_MOUNT.rawValue
                if let privateView {
                    if stage == CSB_KEEPER_VIEW.rawValue {
                        return .viewUnavailable("\(privateView.describe(failure: value)) failed: \(error.description) (errno \(error.rawValue))")
                    }
                    if namespaceStep {
                        let step = csb_stage_name(stage).map { String(cString: $0) } ?? "stage \(stage)"
                        return .viewUnavailable("\(step) failed: \(error.description) (errno \(error.rawValue))")
                    }
                } else if namespaceStep {
                    return .namespacesRefused
                }
                throw Self.failure(stage: stage, errno: error, command: arguments[0], inView: namespaces.contains(.view))
            case .exited(let status):
                // Killed (by the command, where no signal scope keeps it
                // from that) before it could say the command runs.
                keeper.abandon()
                throw .setup(
                    step: "starting the command (the keeper \(Termination(waitStatus: status).description) before it said the command "
                        + "runs; processes the command started may still run)", errno: .noSuchProcess)
            case .ended:
                _ = shutdown(keeper.report.rawValue, CInt(SHUT_RDWR))
                let how = keeper.reap().map { Termination(waitStatus: $0).description } ?? "ended"
                throw .setup(
                    step: "starting the command (the keeper \(how) before it said the command runs; "
                        + "processes the command started may still run)", errno: .noSuchProcess)
            }
        }
    }

    /// The private /dev/shm's limit, as Docker's default.
    static let sharedMemorySize: UInt64 = 64 << 20
    /// The private view's /tmp, in memory: bounded so that a command cannot
    /// take the host's (tmpfs's default is half of it). Large work goes to
    /// `TMPDIR`, the container's `tmp`, on disk.
    static let temporarySize: UInt64 = 512 << 20
    static let temporaryFiles: UInt64 = 65_536

    static func failure(stage: CInt, errno: Errno, command: String, inView: Bool = false) -> SandboxError {
        if stage == CSB_STAGE_EXEC.rawValue {
            // A program the user named by path, there on the host but not in
            // the view: found, and not executable in the sandbox (126), as in
            // the host view, where Landlock refuses it.
            if errno == .noSuchFileOrDirectory, inView, command.contains("/"), access(command, F_OK) == 0 {
                return .cannotExecute(command: command, errno: .noSuchFileOrDirectory)
            }
            return errno == .noSuchFileOrDirectory ? .notFound(command: command) : .cannotExecute(command: command, errno: errno)
        }
        return .setup(step: csb_stage_name(stage).map { String(cString: $0) } ?? "child stage \(stage)", errno: errno)
    }
}

/// The keeper: the launcher's child that starts the command, relays
/// signals to it, and kills every process it started when it ends.
final class Keeper: @unchecked Sendable {
    let pid: pid_t
    let pidfd: OwnedDescriptor
    /// Messages from the child and the keeper; closing our end tells the
    /// keeper to kill everything (when the launcher dies, the kernel does).
    let report: OwnedDescriptor

    /// It kills the command's processes when our end of `report` closes.
    let endsWithLauncher: Bool

    init(pid: pid_t, pidfd: OwnedDescriptor, report: OwnedDescriptor, endsWithLauncher: Bool) {
        self.pid = pid
        self.pidfd = pidfd
        self.report = report
        self.endsWithLauncher = endsWithLauncher
    }

    enum Message {
        case listener(OwnedDescriptor)
        case running(pid_t)
        case namespaces(CInt)
        /// The command's pty, opened by the keeper in the view's devpts.
        case ptyMaster(OwnedDescriptor)
        case ptyTerminal(OwnedDescriptor)
        /// The live grants' area: its writable mount (0) or its O_PATH in the view (1).
        case grantArea(CInt, OwnedDescriptor)
        /// A launch-time grant's mount in the view, by its view step.
        case viewGrant(CInt, OwnedDescriptor)
        /// A socket of the network by name, by its index in the plan.
        case egress(CInt, OwnedDescriptor)
        case failed(stage: CInt, errno: Errno, value: CInt)
        case exited(status: CInt)
        /// End of file: the keeper exited.
        case ended
    }

    func next() throws(Errno) -> Message {
        var stage: CInt = 0
        var error: CInt = 0
        var value: CInt = 0
        var received: CInt = -1
        let result = csb_child_report(report.rawValue, &stage, &error, &value, &received)
        if result < 0 { throw Errno(rawValue: errno) }
        if result == 0 { return .ended }
        let fd = received >= 0 ? OwnedDescriptor(taking: received) : nil
        switch UInt32(stage) {
        case CSB_STAGE_LISTENER.rawValue:
            guard let fd else { throw .protocolError }
            return .listener(fd)
        case CSB_KEEPER_PTY_MASTER.rawValue:
            guard let fd else { throw .protocolError }
            return .ptyMaster(fd)
        case CSB_KEEPER_PTY_TERMINAL.rawValue:
            guard let fd else { throw .protocolError }
            return .ptyTerminal(fd)
        case CSB_KEEPER_GRANT_AREA.rawValue:
            guard let fd, value == 0 || value == 1 else { throw .protocolError }
            return .grantArea(value, fd)
        case CSB_KEEPER_VIEW_GRANT.rawValue:
            guard let fd else { throw .protocolError }
            return .viewGrant(value, fd)
        case CSB_KEEPER_EGRESS.rawValue:
            guard let fd else { throw .protocolError }
            return .egress(value, fd)
        case CSB_KEEPER_RUNNING.rawValue: return .running(value)
        case CSB_KEEPER_NAMESPACES.rawValue: return .namespaces(value)
        case CSB_KEEPER_EXITED.rawValue: return .exited(status: value)
        default: return .failed(stage: stage, errno: Errno(rawValue: error), value: value)
        }
    }

    /// Tells the keeper to end everything, then reaps it.
    func abandon() {
        _ = shutdown(report.rawValue, CInt(SHUT_RDWR))
        _ = reap()
    }

    /// The keeper's own wait status.
    func reap() -> CInt? {
        csb_forward_signals_stop(pid)  // its pid may be reused once reaped
        var status: CInt = 0
        return (try? syscallRetrying { csb_pidfd_wait(pidfd.rawValue, &status) }) == nil ? nil : status
    }
}

/// A running confined command. Waiting also serves the supervisor and the
/// terminal relay, so a caller must wait for the command to make progress.
/// Dropping it without waiting ends the command and every process it started.
public final class ConfinedProcess: @unchecked Sendable {
    /// The command's pid, as the command sees it (in its own pid namespace
    /// when `namespaces` has one); its parent is the keeper, which reaps it.
    public let pid: pid_t
    /// The namespaces the kernel consented to (`LaunchRequest.privateNamespaces`).
    public let namespaces: Namespaces
    /// The tree the command sees.
    public let view: FileSystemView
    /// Why the private view asked for is not in force, when a best-effort
    /// launch fell back to the host view; nil otherwise.
    public internal(set) var viewNotice: String?
    /// What this launch enforces: the plan's report, and the view.
    public var report: EnforcementReport {
        let detail = view == .private
            ? "a root of its own: " + (namespaces.contains(.network) ? "and a network namespace of its own, " : "") + "stat of any other path gives ENOENT"
            : viewNotice.map { "the host view instead: \($0)" } ?? "the host view was asked for: every host path exists for stat, read-only"
        return planReport.adding(Protection(
            name: "private view (only the container, the grants and the policy's system paths exist)", enforced: view == .private, detail: detail))
    }
    private let planReport: EnforcementReport
    /// The live-grant broker served while waiting, nil without one.
    public internal(set) var liveGrants: LiveGrantBroker?
    /// What of its grants can be taken away while it runs, watched while waiting.
    public internal(set) var running: RunningGrants?
    let keeper: Keeper
    let listener: OwnedDescriptor?
    let relay: TerminalRelay?
    let supervisor: MetadataSupervisor
    /// The network by name's proxy and DNS stub, served while the command runs.
    var gateway: EgressGateway?

    /// What the keeper set up: empty when the kernel refused namespaces
    /// (then the command has no /dev/shm and no /proc, as before).
    public struct Namespaces: OptionSet, Sendable {
        public let rawValue: CInt
        public init(rawValue: CInt) { self.rawValue = rawValue }
        /// The keeper is pid 1 of pid and mount namespaces of the command's own.
        public static let pidAndMount = Namespaces(rawValue: CInt(CSB_NAMESPACES_PID_MOUNT.rawValue))
        /// ... inside a user namespace mapping the launcher's uid and gid to themselves.
        public static let user = Namespaces(rawValue: CInt(CSB_NAMESPACES_USER.rawValue))
        /// A private tmpfs on /dev/shm, readable and writable.
        public static let sharedMemory = Namespaces(rawValue: CInt(CSB_NAMESPACES_SHM.rawValue))
        /// A procfs of the pid namespace on /proc, read-only.
        public static let proc = Namespaces(rawValue: CInt(CSB_NAMESPACES_PROC.rawValue))
        /// Every mount read-only but the writable folders (each bound over
        /// itself) and /dev/shm: the kernel refuses metadata changes outside
        /// them with EROFS, and the command makes them natively inside. Not
        /// when a descriptor of the command is a file on a mount of the
        /// host's (`> file`: chmod of /proc/self/fd/1 would reach it), under
        /// `--explain`, for a root launcher on a kernel that lets root chmod
        /// anonymous inodes (before 6.15), or when the kernel refuses a step:
        /// then the supervisor decides every change, as before.
        public static let readOnlyMounts = Namespaces(rawValue: CInt(CSB_NAMESPACES_READ_ONLY_MOUNTS.rawValue))
        /// The private view: a root of the sandbox's own (`FileSystemView.private`).
        public static let view = Namespaces(rawValue: CInt(CSB_NAMESPACES_VIEW.rawValue))
        /// A network namespace of its own, loopback only (the private view, without a network entitlement).
        public static let network = Namespaces(rawValue: CInt(CSB_NAMESPACES_NETWORK.rawValue))
    }

    init(
        pid: pid_t, keeper: Keeper, listener: OwnedDescriptor?, relay: TerminalRelay?, namespaces: Namespaces, view: FileSystemView,
        supervisor: MetadataSupervisor, report: EnforcementReport
    ) {
        self.pid = pid
        self.namespaces = namespaces
        self.view = view
        planReport = report
        self.keeper = keeper
        self.listener = listener
        self.relay = relay
        self.supervisor = supervisor
    }

    /// Not waited for: the keeper ends every process of the command (when
    /// the request let the command die with its launcher) and is reaped.
    deinit {
        if termination == nil && keeper.endsWithLauncher { keeper.abandon() }
        gateway?.stop()
    }

    private var termination: Termination?

    /// The denials seen so far (see `DenialReporter.finish` for the closing line).
    public var denials: DenialReporter? { supervisor.reporter }

    /// Catches SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 before
    /// launch; the last one is held and sent once `forwardSignals` knows the child.
    public static func holdTerminationSignals() {
        _ = csb_forward_signals_to(0)
    }

    /// Forwards the usual termination signals sent to the launcher (the
    /// command has its own session, so the terminal does not reach it),
    /// through the keeper, until `wait()` returns.
    public func forwardSignals() {
        _ = csb_forward_signals_to(keeper.pid)
    }

    /// Serves metadata requests and relays the terminal until the command
    /// exits and the keeper has ended every process it started.
    public func wait() throws(SandboxError) -> Termination {
        if let termination { return termination }
        relay?.begin()
        defer { relay?.end() }
        liveGrants?.terminal = relay.map(LiveGrantTerminal.init(relay:))
        var status: CInt?
        var failure: Errno?
        var serving = listener != nil
        var endedForRevocation = false
        // The grant helper is forked once the command has run a while
        // (`LiveGrantArea.prepareAfter`): a short command never pays for it,
        // and a long one's first folder is attached without the fork's wait.
        var prepareHelperAt = running?.area.map { _ in LiveGrantArea.milliseconds() + LiveGrantArea.prepareAfter }
        if serving { supervisor.beginServing() }  // requests are served with the child's powers
        loop: while true {
            var fds = [pollfd(fd: keeper.report.rawValue, events: Int16(POLLIN), revents: 0)]
            if serving, let listener { fds.append(pollfd(fd: listener.rawValue, events: Int16(POLLIN), revents: 0)) }
            let brokerIndex = fds.count
            let reading = liveGrants?.reading ?? false
            if reading, let socket = liveGrants?.socket { fds.append(pollfd(fd: socket.rawValue, events: Int16(POLLIN) | LiveGrantBroker.pollReadHangUp, revents: 0)) }
            // A question to the person is waited for here, so that nothing else waits for them.
            let questionIndex = fds.count
            let question = liveGrants?.pending
            let questionPolled = question?.descriptor != nil
            if let descriptor = question?.descriptor { fds.append(pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)) }
            // Revocations are watched while grants are attached, served or not.
            let watched = running?.watch?() ?? nil
            if let descriptor = watched?.descriptor { fds.append(pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)) }
            let relayStart = fds.count
            relay?.addRequests(to: &fds)
            let untilPrepared = prepareHelperAt.map { CInt(clamping: max(0, $0 - LiveGrantArea.milliseconds())) }
            let timeouts = [watched?.timeout, question?.timeout, untilPrepared].compactMap { $0 }.filter { $0 >= 0 }
            let ready = poll(&fds, nfds_t(fds.count), timeouts.min() ?? -1)
            if ready < 0 {
                if errno == EINTR { continue }
                failure = Errno(rawValue: errno)
                break
            }
            if serving, let listener {
                if fds[1].revents & Int16(POLLIN) != 0 {
                    supervisor.serveOne(listener: listener)
                } else if fds[1].revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 {
                    serving = false  // every process holding the filter is gone
                }
            }
            if question != nil { liveGrants?.advance(ready: questionPolled && fds[questionIndex].revents != 0) }
            if reading, let liveGrants, fds[brokerIndex].revents != 0 {
                // One request at a time; once every process holding the command's end is gone, no more.
                let revents = fds[brokerIndex].revents
                if revents & Int16(POLLIN) == 0 || !liveGrants.serveOne(hungUp: revents & (Int16(POLLHUP) | LiveGrantBroker.pollReadHangUp) != 0) {
                    liveGrants.stopServing()
                }
            }
            if let at = prepareHelperAt, LiveGrantArea.milliseconds() >= at {
                prepareHelperAt = nil
                running?.area?.prepare()
            }
            if watched != nil {
                running?.recheck?()
                // Fail closed: the keeper is pid 1 of the sandbox's pid namespace, so every process ends with it.
                if running?.failedRevocation != nil && !endedForRevocation {
                    endedForRevocation = true
                    _ = csb_pidfd_send_signal(keeper.pidfd.rawValue, SIGKILL)
                }
            }
            relay?.serve(fds[relayStart...])
            if fds[0].revents != 0 {
                do {
                    switch try keeper.next() {
                    case .exited(let value):
                        // The command ran and every process of it ended; what is left
                        // is the keeper's own exit (its namespaces' teardown).
                        LaunchPhases.mark("command exited")
                        status = value
                        // Every process of the command is gone: the mounts we hold in its
                        // view go now, with the view, not one by one when the launcher exits.
                        running?.release()
                    case .ended: break loop
                    default: continue
                    }
                } catch {
                    failure = error
                    break
                }
            }
        }
        supervisor.endServing()
        // Before the relay's last output and the terminal's own modes.
        liveGrants?.abandonQuestion()
        liveGrants?.terminal = nil
        if let failure {
            keeper.abandon()  // ends the command: nobody would serve or reap it
            throw .setup(step: "waiting for the command", errno: failure)
        }
        let keeperStatus = keeper.reap()
        LaunchPhases.mark("keeper reaped")
        gateway?.stop()  // every process of the command is gone: nothing is left to serve
        gateway = nil
        relay?.finish()
        if endedForRevocation, let reason = running?.failedRevocation { throw .revocationFailed(reason) }
        guard let status else {
            let how = keeperStatus.map { Termination(waitStatus: $0).description } ?? "vanished"
            throw .setup(
                step: "keeping the command's processes (the keeper \(how) before the command ended; "
                    + "processes the command started may still run)", errno: .noSuchProcess)
        }
        let ended = Termination(waitStatus: status)
        termination = ended
        return ended
    }
}

