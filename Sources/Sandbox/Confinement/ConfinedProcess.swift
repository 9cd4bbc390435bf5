@preconcurrency import Glibc
import CSandbox
import SystemPackage

extension ConfinementPlan {
    /// Forks the child, which applies the plan and execs. Returns once the
    /// exec succeeded; a failure before it is reported as a `SandboxError`.
    public func launch() throws(SandboxError) -> ConfinedProcess {
        let argv = CStringArray(arguments)
        let envp = CStringArray(bytes: environment)
        let kept = request.keptDescriptors.filter { $0 > 2 }
        for fd in kept where fcntl(fd, F_GETFD) < 0 {
            throw .usage("--keep-fd \(fd): that descriptor is not open in the launcher")
        }
        var pid: pid_t = 0
        var pidfd: CInt = -1
        var reportFD: CInt = -1
        // Every pointer the child reads stays valid until csb_spawn_confined
        // returns: with CLONE_VFORK the child has exec'd or exited by then.
        let filterBytes = filter ?? []
        let guardBytes = terminalGuard ?? []
        let spawned: CInt = executable.withCString { path in
            workingDirectory.withCString { cwd in
                kept.withUnsafeBufferPointer { keptFDs in
                    filterBytes.withUnsafeBytes { bpf in
                        guardBytes.withUnsafeBytes { guardBPF in
                            var plan = csb_child_plan()
                            plan.path = path
                            plan.argv = UnsafePointer(argv.pointer)
                            plan.envp = UnsafePointer(envp.pointer)
                            plan.working_directory = cwd
                            plan.working_directory_fd = workingDirectoryDescriptor.rawValue
                            plan.stdio = (request.standardInput, request.standardOutput, request.standardError)
                            plan.kept_fds = keptFDs.baseAddress
                            plan.kept_fds_count = CInt(keptFDs.count)
                            plan.ruleset_fd = ruleset?.descriptor.rawValue ?? -1
                            plan.restrict_flags = restrictFlags
                            plan.seccomp_filter = filter == nil ? nil : bpf.baseAddress
                            plan.seccomp_filter_length = UInt16(bpf.count / 8)
                            plan.seccomp_guard = terminalGuard == nil ? nil : guardBPF.baseAddress
                            plan.seccomp_guard_length = UInt16(guardBPF.count / 8)
                            plan.seccomp_listener = (filter != nil && superviseMetadata) ? 1 : 0
                            plan.drop_capabilities = Capabilities.canDropBoundingSet ? 1 : 0
                            plan.last_capability = Capabilities.lastCapability
                            plan.new_session = 1
                            plan.die_with_parent = request.dieWithParent ? 1 : 0
                            return csb_spawn_confined(&plan, &pid, &pidfd, &reportFD)
                        }
                    }
                }
            }
        }
        guard spawned == 0 else { throw .setup(step: "fork", errno: Errno(rawValue: errno)) }
        let process = OwnedDescriptor(taking: pidfd)
        let report = OwnedDescriptor(taking: reportFD)

        var listener: OwnedDescriptor?
        while true {
            var stage: CInt = 0
            var error: CInt = 0
            var received: CInt = -1
            let result = csb_child_report(report.rawValue, &stage, &error, &received)
            if result == 0 { break }  // end of file: the exec succeeded
            if result < 0 {
                kill(pid, SIGKILL)
                throw .setup(step: "reading the child's report", errno: Errno(rawValue: errno))
            }
            if stage == CSB_STAGE_LISTENER.rawValue, received >= 0 {
                listener = OwnedDescriptor(taking: received)
                continue
            }
            var status: CInt = 0
            _ = csb_pidfd_wait(process.rawValue, &status)
            throw Self.failure(stage: stage, errno: Errno(rawValue: error), command: arguments[0])
        }
        return ConfinedProcess(
            pid: pid, pidfd: process, listener: listener,
            supervisor: MetadataSupervisor(writableRoots: writableRoots, readableRoots: readableRoots))
    }

    static func failure(stage: CInt, errno: Errno, command: String) -> SandboxError {
        if stage == CSB_STAGE_EXEC.rawValue {
            return errno == .noSuchFileOrDirectory ? .notFound(command: command) : .cannotExecute(command: command, errno: errno)
        }
        let steps: [UInt32: String] = [
            CSB_STAGE_SIGNALS.rawValue: "resetting signals", CSB_STAGE_PARENT_DEATH.rawValue: "PR_SET_PDEATHSIG",
            CSB_STAGE_SESSION.rawValue: "setsid", CSB_STAGE_STDIO.rawValue: "binding stdin/stdout/stderr",
            CSB_STAGE_FDS.rawValue: "closing descriptors", CSB_STAGE_CHDIR.rawValue: "changing to the working directory",
            CSB_STAGE_NO_NEW_PRIVS.rawValue: "PR_SET_NO_NEW_PRIVS", CSB_STAGE_CAPABILITIES.rawValue: "dropping capabilities",
            CSB_STAGE_LANDLOCK.rawValue: "landlock_restrict_self", CSB_STAGE_SECCOMP.rawValue: "loading the seccomp filter",
        ]
        return .setup(step: steps[UInt32(stage)] ?? "child stage \(stage)", errno: errno)
    }
}

/// A running confined command. Waiting also serves the supervisor, so a
/// caller must wait for the command to make progress on metadata changes.
public final class ConfinedProcess: @unchecked Sendable {
    public let pid: pid_t
    let pidfd: OwnedDescriptor
    let listener: OwnedDescriptor?
    let supervisor: MetadataSupervisor

    init(pid: pid_t, pidfd: OwnedDescriptor, listener: OwnedDescriptor?, supervisor: MetadataSupervisor) {
        self.pid = pid
        self.pidfd = pidfd
        self.listener = listener
        self.supervisor = supervisor
    }

    /// Catches SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 before
    /// launch; the last one is held and sent once `forwardSignals` knows the child.
    public static func holdTerminationSignals() {
        _ = csb_forward_signals_to(0)
    }

    /// Forwards the usual termination signals sent to the launcher (the
    /// command has its own session, so the terminal does not reach it).
    public func forwardSignals() {
        _ = csb_forward_signals_to(pid)
    }

    /// Serves metadata requests until the command exits, then reaps it.
    public func wait() throws(SandboxError) -> Termination {
        var fds = [pollfd(fd: pidfd.rawValue, events: Int16(POLLIN), revents: 0)]
        if let listener { fds.append(pollfd(fd: listener.rawValue, events: Int16(POLLIN), revents: 0)) }
        while true {
            let ready = poll(&fds, nfds_t(fds.count), -1)
            if ready < 0 {
                if errno == EINTR { continue }
                throw .setup(step: "poll", errno: Errno(rawValue: errno))
            }
            if fds.count > 1 {
                if fds[1].revents & Int16(POLLIN) != 0, let listener {
                    supervisor.serveOne(listener: listener.rawValue)
                } else if fds[1].revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 {
                    fds.removeLast()  // every process holding the filter is gone
                }
            }
            if fds[0].revents != 0 {
                var status: CInt = 0
                do {
                    _ = try syscallRetrying { csb_pidfd_wait(pidfd.rawValue, &status) }
                } catch {
                    throw .setup(step: "waitid", errno: error)
                }
                let signal = status & 0x7F
                return signal == 0 ? .exited((status >> 8) & 0xFF) : .signaled(signal)
            }
        }
    }
}

/// NUL-terminated copies for execve, freed with the value.
final class CStringArray {
    let pointer: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
    private let count: Int

    init(_ strings: [String]) {
        count = strings.count
        pointer = .allocate(capacity: count + 1)
        for (index, string) in strings.enumerated() { pointer[index] = strdup(string) }
        pointer[count] = nil
    }

    init(bytes entries: [[UInt8]]) {
        count = entries.count
        pointer = .allocate(capacity: count + 1)
        for (index, entry) in entries.enumerated() {
            let copy = malloc(entry.count + 1)!.assumingMemoryBound(to: CChar.self)  // freed in deinit
            for (offset, byte) in entry.enumerated() { copy[offset] = CChar(bitPattern: byte) }
            copy[entry.count] = 0
            pointer[index] = copy
        }
        pointer[count] = nil
    }

    deinit {
        for index in 0..<count { free(pointer[index]) }
        pointer.deallocate()
    }
}
