@preconcurrency import Glibc
import CSyscalls
import CSeccomp
import SystemPackage

/// The seccomp-bpf filter: default deny, an allow-list of what real writers
/// need, explicit refusals for what breaks confinement, and the metadata
/// changes Landlock cannot see sent to the supervisor. Assembled in the
/// parent as raw BPF (libseccomp only names the syscalls), which the child
/// loads with one `seccomp(2)` call: nothing that allocates runs after fork.
struct SyscallFilter {
    /// Everything not listed fails with ENOSYS, so programs fall back as they
    /// do on older kernels (glibc retries clone3 as clone, libuv drops io_uring).
    static let defaultErrno = ENOSYS

    /// Allowed without conditions: I/O, files (Landlock decides which),
    /// memory, time, signals (Landlock scopes them), processes, sockets
    /// already created, and further self-restriction.
    static let allowed: [String] = [
        // I/O on descriptors
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
        "lseek", "close", "close_range", "dup", "dup2", "dup3", "pipe", "pipe2", "fcntl", "flock", "fsync",
        "fdatasync", "sync", "syncfs", "sync_file_range", "fallocate", "ftruncate", "truncate", "sendfile",
        "splice", "tee", "copy_file_range", "readahead", "fadvise64",
        // paths: Landlock mediates opening, creating, removing and renaming;
        // `argumentGuard` refuses creating set-user-ID and set-group-ID files
        "open", "openat", "creat", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs",
        "fstatfs", "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64",
        "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "rename", "renameat", "renameat2", "link",
        "linkat", "unlink", "unlinkat", "symlink", "symlinkat", "mknod", "mknodat", "umask",
        // on descriptors opened under Landlock (O_PATH ones give EBADF)
        "fgetxattr", "flistxattr",
        // waiting and events
        "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
        "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4", "timerfd_create",
        "timerfd_settime", "timerfd_gettime", "inotify_init", "inotify_init1", "inotify_rm_watch",
        // memory
        "mmap", "munmap", "mprotect", "mremap", "msync", "mincore", "madvise", "brk", "mlock", "mlock2",
        "munlock", "membarrier", "get_mempolicy", "set_mempolicy", "mbind", "pkey_alloc", "pkey_free",
        "pkey_mprotect",
        // signals and time
        "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigsuspend",
        "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "kill", "tkill", "tgkill", "pause", "alarm",
        "getitimer", "setitimer", "nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres",
        "gettimeofday", "time", "times", "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun",
        "timer_delete",
        // processes and threads (clone is filtered below; `argumentGuard`
        // limits the scheduling setters to the caller)
        "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "set_tid_address",
        "set_robust_list", "get_robust_list", "futex", "futex_waitv", "rseq", "restart_syscall", "arch_prctl",
        "prctl", "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_setparam",
        "sched_getscheduler", "sched_setscheduler", "sched_get_priority_max", "sched_get_priority_min",
        "sched_rr_get_interval", "sched_getattr", "sched_setattr", "getpriority", "setpriority", "getcpu",
        "pidfd_open", "pidfd_send_signal",
        // identity: without capabilities these can only lower privilege
        "getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
        "getgroups", "getpgid", "getpgrp", "getsid", "setpgid", "setsid", "setuid", "setgid", "setreuid",
        "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups", "capget", "capset",
        "uname", "sysinfo", "getrusage", "getrlimit", "setrlimit", "getrandom",
        // sockets that exist already (socket and socketpair are filtered below)
        "sendmsg", "recvmsg", "sendto", "recvfrom", "sendmmsg", "recvmmsg", "shutdown", "getsockname",
        "getpeername", "getsockopt", "setsockopt", "connect", "bind", "listen", "accept", "accept4",
        // restricting oneself further is always fine
        "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    ]

    /// Refused with EPERM whatever the policy says, with the reason shown
    /// when a policy asks for one of them.
    static let neverAllowed: [String: String] = {
        var reasons: [String: String] = [:]
        for name in ["ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise"] {
            reasons[name] = "it reaches into other processes"
        }
        for name in ["name_to_handle_at", "open_by_handle_at"] {
            reasons[name] = "handle-based opens bypass path rules"
        }
        for name in ["mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "fsopen", "fsconfig",
                     "fsmount", "fspick", "open_tree", "move_mount", "mount_setattr", "clone3"] {
            reasons[name] = "namespaces and mounts could rebuild the file-system view"
        }
        for name in ["bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
                     "io_uring_setup", "io_uring_enter", "io_uring_register", "fanotify_init", "fanotify_mark",
                     "memfd_secret"] {
            reasons[name] = "a kernel interface that is not confined by Landlock or seccomp"
        }
        for name in ["msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl",
                     "shmget", "shmat", "shmdt", "shmctl", "mq_open", "mq_unlink", "mq_timedsend",
                     "mq_timedreceive", "mq_notify", "mq_getsetattr"] {
            reasons[name] = "System V and POSIX message IPC is shared with processes outside the sandbox"
        }
        reasons["openat2"] = "its mode is in a struct the filter cannot read (answered ENOSYS: libc falls back to openat)"
        for name in supervised {
            reasons[name] = "it is checked by the supervisor, never allowed blindly"
        }
        return reasons
    }()

    /// Allowed only with certain arguments (see `rules()`): a policy may not
    /// allow them whole, or its unconditional rule would come first and the
    /// argument tests would never run.
    static let argumentFiltered: [String: String] = [
        "clone": "its flags are checked: no new namespaces",
        "socket": "its family is checked: never AF_UNIX, IP only with a network entitlement",
        "socketpair": "only stream and seqpacket pairs are allowed",
        "memfd_create": "only with MFD_NOEXEC_SEAL, so the memory can never be executed",
        "prlimit64": "only on the calling process itself",
        "personality": "only the default persona",
    ]

    /// What tools answer best: "not implemented" makes them fall back.
    static let answeredWithENOSYS: Set<String> = ["io_uring_setup", "io_uring_enter", "io_uring_register", "clone3", "openat2"]

    /// Changes to metadata that Landlock does not mediate: the supervisor
    /// performs them only beneath a writable folder (or they fail with EPERM
    /// when user notification is unavailable).
    static let metadataChanges: [String] = [
        "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime", "utimes",
        "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
        "fremovexattr",
    ]

    /// Reads that Landlock does not mediate: an inotify watch on a folder
    /// outside would report the names of files created there, and a path's
    /// extended attributes can hold a download's origin URL. The supervisor
    /// answers them only beneath folders the sandbox may read.
    static let watchesAndAttributeReads: [String] = ["inotify_add_watch"] + attributeReads
    static let attributeReads: [String] = ["getxattr", "lgetxattr", "listxattr", "llistxattr"]

    /// Everything the supervisor decides.
    static var supervised: [String] { metadataChanges + watchesAndAttributeReads }

    /// Syscalls newer than Debian 12's libseccomp (2.5.4), by their number
    /// in the table x86-64 and arm64 share since Linux 5.1. Anything else
    /// libseccomp does not know stays denied (ENOSYS), for example
    /// getxattrat (464), listxattrat (465) and file_setattr (469).
    static let numbersNewerThanLibseccomp: [String: Int32] = ["fchmodat2": 452]

    /// The native syscall number of `name`, nil when neither libseccomp nor
    /// `numbersNewerThanLibseccomp` knows it.
    static func number(_ name: String) -> Int32? {
        let number = seccomp_syscall_resolve_name(name)
        if number != __NR_SCMP_ERROR { return number }
        return numbersNewerThanLibseccomp[name]
    }

    static func isKnown(_ name: String) -> Bool {
        number(name) != nil
    }

    struct Options: Equatable {
        var networkClient = false
        var networkServer = false
        /// A network namespace of the sandbox's own even with `networkClient`
        /// (an allowed-hosts list): AF_UNIX as without a network.
        var ownNetwork = false
        var extraSyscalls: [String] = []
        /// Send metadata changes and watches to a user-notification
        /// supervisor; when false they fail with EPERM everywhere.
        var superviseMetadata = true
        /// `--explain`: path calls, refused syscalls and refused sockets go
        /// to the `DenialObserver` too. Off, the filter is what it always was.
        var observeDenials = false
        /// The keeper made every mount read-only but the writable folders:
        /// metadata changes are the kernel's to refuse (EROFS), and only a
        /// chmod to a set-user-ID or set-group-ID mode still goes to the
        /// supervisor (which drops those bits), EPERM without one.
        var readOnlyMounts = false
        /// The private view, with no descriptor of a folder that could lead
        /// out of it: everything that exists may be read, so attribute reads
        /// and inotify watches run natively.
        var nativeAttributeReads = false
        /// With `nativeAttributeReads`: inotify watches still go to the
        /// supervisor, which records them, so that a folder taken away
        /// while the command runs takes its watches with it.
        var superviseWatches = false
        /// AF_UNIX stream and seqpacket sockets may be made (the private
        /// view's own network namespace: no abstract name of the host's can
        /// be reached), and every `connect` goes to the supervisor, which
        /// connects only to a socket on one of the sandbox's own mounts.
        var unixSockets = false
    }

    /// Where the mode is, for the calls that take one.
    static let modeArgument: [String: UInt32] = ["chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2]

    let options: Options

    /// A test of one argument, on the low 32 bits the kernel reads of an
    /// int, a pid or a flags word: `(argument & mask) == value`, or `!=`.
    struct ArgumentTest: Equatable {
        let argument: UInt32
        var mask: UInt32 = 0xFFFF_FFFF
        let value: UInt32
        var equal = true
    }

    /// What one syscall gets: the first case whose tests all hold (no
    /// tests: always), else the default action.
    struct Case: Equatable {
        let tests: [ArgumentTest]
        let action: UInt32
    }

    /// One syscall's cases, in the order they are tried.
    struct Rule: Equatable {
        let number: Int32
        var cases: [Case]
    }

    /// The whole filter as data, sorted by syscall number: the single source
    /// both `compile()` and the libseccomp oracle in the tests are built from.
    /// A sorted array, not a dictionary: this runs at every launch.
    func rules() -> [Rule] {
        var added: [(number: Int32, case: Case)] = []
        added.reserveCapacity(400)
        func add(_ name: String, _ action: UInt32, _ tests: [ArgumentTest] = []) {
            guard let number = Self.number(name) else { return }  // unknown here: stays denied
            guard action != Self.errnoAction(Self.defaultErrno) else { return }  // the default does it
            added.append((number, Case(tests: tests, action: action)))
        }
        let supervised = Self.supervised
        let observedPaths = options.observeDenials ? Set(DenialObserver.pathCalls.keys) : []
        let observedRefusals = options.observeDenials ? Set(DenialObserver.refusedSyscalls) : []
        // A policy's extra syscalls never widen what is refused, supervised or
        // allowed only with certain arguments (PolicyLoader refuses them too;
        // this holds for policies built in code).
        let extra = options.extraSyscalls.filter {
            Self.neverAllowed[$0] == nil && Self.argumentFiltered[$0] == nil && !supervised.contains($0)
        }
        for name in Self.allowed + extra where !(options.unixSockets && name == "connect") {
            add(name, observedPaths.contains(name) ? Self.notifyAction : Self.allowAction)
        }
        if options.unixSockets { add("connect", Self.notifyAction) }
        for (name, _) in Self.neverAllowed where !supervised.contains(name) {
            // Observed refusals get the same errno from the observer.
            add(name, observedRefusals.contains(name) ? Self.notifyAction
                : Self.errnoAction(Self.answeredWithENOSYS.contains(name) ? ENOSYS : EPERM))
        }
        for name in supervised {
            if options.nativeAttributeReads, Self.attributeReads.contains(name)
                || (name == "inotify_add_watch" && !(options.superviseWatches && options.superviseMetadata)) {
                add(name, Self.allowAction)
                continue
            }
            if options.readOnlyMounts, Self.metadataChanges.contains(name) {
                let setID = options.superviseMetadata ? Self.notifyAction : Self.errnoAction(EPERM)
                if let argument = Self.modeArgument[name] {
                    add(name, Self.allowAction, [ArgumentTest(argument: argument, mask: Self.setIDBits, value: 0)])
                    add(name, setID, [ArgumentTest(argument: argument, mask: Self.setIDBits, value: 0, equal: false)])
                } else {
                    add(name, Self.allowAction)
                }
                continue
            }
            // Without a supervisor: changes and watches EPERM; attribute reads
            // "not supported", which ls and cp take as a file system without them.
            let unsupervised = Self.attributeReads.contains(name) ? EOPNOTSUPP : EPERM
            add(name, options.superviseMetadata ? Self.notifyAction : Self.errnoAction(unsupervised))
        }

        // Which requests is decided by `argumentGuard`, a filter of its own.
        add("ioctl", Self.allowAction)

        // Threads and processes, but no new namespaces.
        let namespaceFlags: UInt32 = 0x80 | 0x20000 | 0x0200_0000 | 0x0400_0000 | 0x0800_0000 | 0x1000_0000
            | 0x2000_0000 | 0x4000_0000
        add("clone", Self.allowAction, [ArgumentTest(argument: 0, mask: namespaceFlags, value: 0)])
        for bit in 0..<32 where namespaceFlags & (1 << UInt32(bit)) != 0 {
            let flag: UInt32 = 1 << UInt32(bit)
            add("clone", Self.errnoAction(EPERM), [ArgumentTest(argument: 0, mask: flag, value: flag)])
        }

        // Socket pairs only as streams: a datagram pair could sendto() a
        // pathname socket outside, which Landlock does not see before ABI 9.
        for type: UInt32 in [1, 5] {  // SOCK_STREAM, SOCK_SEQPACKET
            add("socketpair", Self.allowAction, [ArgumentTest(argument: 0, value: 1), ArgumentTest(argument: 1, mask: 0xF, value: type)])
        }
        add("socketpair", Self.errnoAction(EACCES), [ArgumentTest(argument: 1, mask: 0xF, value: 2)])
        // New sockets: never AF_UNIX (connect() to a pathname socket is not
        // mediated by Landlock before ABI 9) unless the supervisor takes every
        // connect, and then streams and seqpackets only (a datagram socket
        // reaches a pathname socket by sendto, which the filter cannot see);
        // IP only with a network entitlement.
        var deniedFamilies: [UInt32] = [1, 17]  // AF_UNIX, AF_PACKET
        if options.unixSockets {
            for type: UInt32 in [1, 5] {  // SOCK_STREAM, SOCK_SEQPACKET, with any SOCK_NONBLOCK or SOCK_CLOEXEC
                add("socket", Self.allowAction, [ArgumentTest(argument: 0, value: 1), ArgumentTest(argument: 1, mask: 0xF, value: type)])
            }
        }
        if options.networkClient || options.networkServer {
            for family: UInt32 in [2, 10] {  // AF_INET, AF_INET6
                add("socket", Self.allowAction, [ArgumentTest(argument: 0, value: family)])
            }
            // NETLINK_ROUTE only, read by getaddrinfo() for AI_ADDRCONFIG.
            add("socket", Self.allowAction, [ArgumentTest(argument: 0, value: 16), ArgumentTest(argument: 2, value: 0)])
            add("socket", Self.errnoAction(EACCES), [ArgumentTest(argument: 0, value: 16), ArgumentTest(argument: 2, value: 0, equal: false)])
        } else {
            deniedFamilies += [2, 10, 16]
        }
        for family in deniedFamilies {
            // Observed, the observer answers the same EACCES.
            add("socket", options.observeDenials ? Self.notifyAction : Self.errnoAction(EACCES), [ArgumentTest(argument: 0, value: family)])
        }

        // Memory-backed files only if they can never become executable
        // (MFD_NOEXEC_SEAL): Landlock does not mediate executing them.
        add("memfd_create", Self.allowAction, [ArgumentTest(argument: 1, mask: 0x8, value: 0x8)])
        add("memfd_create", Self.errnoAction(EACCES), [ArgumentTest(argument: 1, mask: 0x8, value: 0)])

        // Resource limits and personality of oneself only.
        add("prlimit64", Self.allowAction, [ArgumentTest(argument: 0, value: 0)])
        for persona: UInt32 in [0, 0xFFFF_FFFF] {
            add("personality", Self.allowAction, [ArgumentTest(argument: 0, value: persona)])
        }

        // By number (a bucket each: they are small and dense), each
        // syscall's cases in the order they were added.
        var buckets = [[Case]](repeating: [], count: Int(added.map(\.number).max() ?? 0) + 1)
        for (number, ruleCase) in added where number >= 0 {
            // An unconditional case makes any later one unreachable (libseccomp drops them too).
            guard buckets[Int(number)].last?.tests.isEmpty != true else { continue }
            buckets[Int(number)].append(ruleCase)
        }
        var rules: [Rule] = []
        for (number, cases) in buckets.enumerated() where !cases.isEmpty {
            rules.append(Rule(number: Int32(number), cases: cases))
        }
        return rules
    }

    /// Builds the filter as raw `struct sock_filter` bytes, with our own
    /// assembler. The syscall numbers are cut into runs that end the same way
    /// (runs of allowed calls, gaps that get the default, one run per syscall
    /// with argument tests), and a binary search on the number finds the run:
    /// about eight comparisons, where libseccomp's list is one per rule, and a
    /// program about half as long as one leaf per number, which the kernel
    /// checks and compiles at every launch. `SyscallFilterTests` compares it
    /// with libseccomp's build of the same rules, syscall by syscall and
    /// argument by argument. libseccomp itself only names the syscalls.
    ///
    /// The filters of the shipped option sets come assembled with the
    /// binary (`CompiledFilters.swift`, which `CompiledFiltersTests`
    /// requires to equal `assemble()`): assembling takes about 0.2 ms,
    /// mostly naming syscalls, at every launch.
    func compile() throws(SandboxError) -> [UInt8] {
        if let compiled = Self.compiled(options) { return compiled.withUnsafeBytes { Array($0) } }
        return try assemble()
    }

    /// The filter, assembled now (see `compile()`).
    func assemble() throws(SandboxError) -> [UInt8] {
        let rules = rules()
        var program = ClassicBPF()
        let badArchitecture = program.newLabel("bad-architecture"), syscalls = program.newLabel("syscalls")
        program.load(Field.arch)
        program.jump(if: .equal, seccomp_arch_native(), else: badArchitecture)
        program.load(Field.nr)
        if seccomp_arch_native() == Self.x86_64 {
            program.jump(if: .greaterOrEqual, 0x4000_0000, then: badArchitecture)  // the x32 numbers
        }
        program.jump(to: syscalls)
        program.place(badArchitecture)  // within reach of the conditional jumps above
        program.ret(Self.errnoAction(ENOSYS))
        program.place(syscalls)

        let runs = Self.runs(of: rules, defaultAction: Self.errnoAction(Self.defaultErrno))
        // Instructions each subtree takes, so that a jump over one is short
        // when it can be; a run's own count is that of its emitted body.
        let runSizes = runs.map { run in
            var body = ClassicBPF()
            run.emit(into: &body)
            return body.instructionCount
        }
        func size(_ range: Range<Int>) -> Int {
            guard range.count > 1 else { return runSizes[range.lowerBound] }
            let middle = range.lowerBound + range.count / 2
            let lower = size(range.lowerBound..<middle)
            return (lower <= 255 ? 1 : 2) + lower + size(middle..<range.upperBound)
        }
        func tree(_ range: Range<Int>) {
            guard range.count > 1 else { return runs[range.lowerBound].emit(into: &program) }
            let middle = range.lowerBound + range.count / 2
            let upper = program.newLabel()
            if size(range.lowerBound..<middle) <= 255 {
                program.jump(if: .greaterOrEqual, runs[middle].first, then: upper)
            } else {
                // Too far for a conditional jump's 8 bits: through a BPF_JA.
                let lower = program.newLabel()
                program.jump(if: .greaterOrEqual, runs[middle].first, else: lower)
                program.jump(to: upper)
                program.place(lower)
            }
            tree(range.lowerBound..<middle)
            program.place(upper)
            tree(middle..<range.upperBound)
        }
        tree(0..<runs.count)
        do {
            return try program.assemble()
        } catch {
            throw .setup(step: "assembling the seccomp filter: \(error)", errno: .invalidArgument)
        }
    }

    /// Syscall numbers from `first` up to the next run's first that end alike.
    struct Run {
        let first: UInt32
        /// One unconditional action, or one syscall's cases (never merged).
        let action: UInt32?
        let cases: [Case]
        let defaultAction: UInt32

        func emit(into program: inout ClassicBPF) {
            if let action { return program.ret(action) }
            for ruleCase in cases {
                guard !ruleCase.tests.isEmpty else { return program.ret(ruleCase.action) }
                let next = program.newLabel()
                for test in ruleCase.tests {
                    program.load(Field.low(test.argument))
                    if test.mask != 0xFFFF_FFFF { program.and(test.mask) }
                    program.jump(if: .equal, test.value, then: test.equal ? nil : next, else: test.equal ? next : nil)
                }
                program.ret(ruleCase.action)
                program.place(next)
            }
            program.ret(defaultAction)
        }
    }

    /// The runs covering every number from 0 up, in order: neighbours with
    /// the same unconditional action (the default included) merge.
    static func runs(of rules: [Rule], defaultAction: UInt32) -> [Run] {
        var runs: [Run] = []
        func append(_ first: UInt32, action: UInt32?, cases: [Case] = []) {
            if let action, let last = runs.last, last.action == action { return }  // the same ending: one run
            runs.append(Run(first: first, action: action, cases: cases, defaultAction: defaultAction))
        }
        var next: UInt32 = 0
        for rule in rules {
            let number = UInt32(bitPattern: rule.number)
            if number > next { append(next, action: defaultAction) }  // the gap before it
            if rule.cases.count == 1, rule.cases[0].tests.isEmpty {
                append(number, action: rule.cases[0].action)
            } else {
                append(number, action: nil, cases: rule.cases)
            }
            next = number + 1
        }
        append(next, action: defaultAction)  // everything above the last rule
        return runs
    }

    static let x86_64: UInt32 = 0xC000_003E  // AUDIT_ARCH_X86_64

    static let allowAction: UInt32 = 0x7FFF_0000  // SCMP_ACT_ALLOW
    static let notifyAction: UInt32 = 0x7FC0_0000  // SCMP_ACT_NOTIFY
    static func errnoAction(_ code: CInt) -> UInt32 { 0x0005_0000 | (UInt32(code) & 0xFFFF) }  // SCMP_ACT_ERRNO

}

// MARK: - The argument guard

/// ioctl requests as the kernel reads them: the low 32 bits of `cmd`. The
/// numbers are those of asm-generic, which x86-64 and arm64 use.
enum IoctlRequest {
    /// What shells, editors, pagers and REPLs ask of a terminal
    /// (TCGETS ... TIOCGSID, the termios2 variants TCGETS2 ... TCSETSF2).
    static let terminal: [UInt32] = [
        0x5401, 0x5402, 0x5403, 0x5404,  // TCGETS, TCSETS, TCSETSW, TCSETSF
        0x5405, 0x5406, 0x5407, 0x5408,  // TCGETA, TCSETA, TCSETAW, TCSETAF
        0x5409, 0x540A, 0x540B,  // TCSBRK, TCXONC, TCFLSH
        0x540F, 0x5410, 0x5411,  // TIOCGPGRP, TIOCSPGRP, TIOCOUTQ
        0x5413, 0x5414, 0x5429,  // TIOCGWINSZ, TIOCSWINSZ, TIOCGSID
        0x802C_542A, 0x402C_542B, 0x402C_542C, 0x402C_542D,  // TCGETS2, TCSETS2, TCSETSW2, TCSETSF2
        // Making ptys of its own (openpty, script, tmux), in the private
        // view's devpts: TIOCGPTN, TIOCSPTLCK, TIOCGPTLCK, TIOCGPTPEER, and
        // taking or dropping a controlling terminal: TIOCSCTTY, TIOCNOTTY.
        0x8004_5430, 0x4004_5431, 0x8004_5439, 0x5441, 0x540E, 0x5422,
    ]
    /// Any descriptor: FIONREAD, FIONBIO, FIONCLEX, FIOCLEX, FIOASYNC.
    static let descriptor: [UInt32] = [0x541B, 0x5421, 0x5450, 0x5451, 0x5452]
    /// Regular files. FICLONE and FICLONERANGE (cp --reflink) write only to
    /// the fd they are called on, which must be open for writing, so Landlock
    /// already checked it; the rest read: FS_IOC_GETFLAGS (and its 32-bit
    /// form), FS_IOC_GETVERSION (and 32-bit), FS_IOC_FSGETXATTR,
    /// FS_IOC_FIEMAP, FIGETBSZ.
    static let file: [UInt32] = [
        0x4004_9409, 0x4020_940D,
        0x8008_6601, 0x8004_6601, 0x8008_7601, 0x8004_7601, 0x801C_581F, 0xC020_660B, 0x0000_0002,
    ]
    /// Interface queries on a socket, for the network entitlements only (any
    /// socket answers them, an AF_UNIX pair too): SIOCGIFNAME, SIOCGIFCONF,
    /// SIOCGIFFLAGS, SIOCGIFADDR, SIOCGIFDSTADDR, SIOCGIFBRDADDR,
    /// SIOCGIFNETMASK, SIOCGIFMTU, SIOCGIFHWADDR, SIOCGIFINDEX, SIOCGIFTXQLEN,
    /// SIOCATMARK.
    static let networkQuery: [UInt32] = [
        0x8910, 0x8912, 0x8913, 0x8915, 0x8917, 0x8919, 0x891B, 0x8921, 0x8927, 0x8933, 0x8942, 0x8905,
    ]
    /// Typing into or taking over a terminal: TIOCSTI, TIOCLINUX, TIOCSETD, TIOCCONS.
    static let terminalTakeover: [UInt32] = [0x5412, 0x541C, 0x5423, 0x541D]
    /// Setting inode attributes on any fd, one opened read-only too:
    /// FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR and FS_IOC_SETVERSION, whose new
    /// generation changes a folder's file handle, so that another app's
    /// bookmark resolves as replaced; with their 32-bit forms and ext4's own
    /// EXT4_IOC_SETVERSION. Everything not allowed is refused anyway; these
    /// get EPERM rather than ENOTTY so that chattr says what happened.
    static let attributeChange: [UInt32] = [
        0x4008_6602, 0x4004_6602, 0x401C_5820, 0x4008_7602, 0x4004_7602, 0x4008_6604, 0x4004_6604,
    ]
}

extension SyscallFilter {
    /// `struct seccomp_data` offsets: nr, arch, and the low 32 bits of an argument.
    private enum Field {
        static let nr: UInt32 = 0
        static let arch: UInt32 = 4
        static func low(_ argument: UInt32) -> UInt32 {
            16 + 8 * argument + (1.bigEndian == 1 ? 4 : 0)
        }
    }

    /// Creation flags after which open's mode argument means something:
    /// O_CREAT and the kernel's __O_TMPFILE bit.
    static let creatingOpenFlags: UInt32 = 0x40 | 0x40_0000
    /// S_ISUID | S_ISGID.
    static let setIDBits: UInt32 = 0o6000
    /// O_ACCMODE, whose two bits both set are Linux's access mode 3
    /// ("check for read and write permission, then allow neither").
    /// Landlock asks for no right at all to open a file in this mode, so it
    /// would open any file or device the caller's uid may: the device's open
    /// routine runs, and the descriptor carries fgetxattr, flistxattr and the
    /// file ioctls the guard allows (inode flags, extents), on files the
    /// policy never named.
    static let accessModeThree: UInt32 = 0o3

    /// The second filter, hand-written classic BPF for what libseccomp
    /// cannot say: it drops conditional rules next to an unconditional rule
    /// of the same syscall, and cannot say "any value but these" on the low
    /// 32 bits of an argument, which is all the kernel reads of an int (a
    /// 64-bit compare let `TIOCSTI | 1 << 32` through in CVE-2019-10063).
    /// The kernel runs both filters and keeps the strictest answer, so this
    /// one only ever narrows what the main filter allows:
    /// - ioctl: the requests real tools use (see `IoctlRequest`), terminal
    ///   takeover and inode attribute changes EPERM, anything else ENOTTY;
    /// - open, openat: EACCES for access mode 3, which Landlock lets open
    ///   anything (see `accessModeThree`);
    /// - open, openat, creat, mknod, mknodat: EPERM for a set-user-ID or
    ///   set-group-ID mode (open's mode only counts with O_CREAT or
    ///   O_TMPFILE); openat2 hides its mode in a struct: ENOSYS, and libc
    ///   falls back to openat;
    /// - setpriority, sched_setaffinity, sched_setscheduler, sched_setparam,
    ///   sched_setattr: the caller only (pid 0; setpriority PRIO_PROCESS 0),
    ///   EPERM for any other process;
    /// - renameat2 with RENAME_WHITEOUT: EPERM (it makes a device node);
    /// - fcntl F_SETLEASE and F_NOTIFY (dnotify): EPERM;
    /// - any other architecture or the x32 numbers: ENOSYS.
    func argumentGuard() throws(SandboxError) -> [UInt8] {
        if let compiled = Self.compiledGuard(options) { return compiled.withUnsafeBytes { Array($0) } }
        return try assembleArgumentGuard()
    }

    /// The argument guard, assembled now.
    func assembleArgumentGuard() throws(SandboxError) -> [UInt8] {
        do {
            return try argumentGuardProgram().assemble()
        } catch {
            throw .setup(step: "assembling the argument guard: \(error)", errno: .invalidArgument)
        }
    }

    func argumentGuardProgram() -> ClassicBPF {
        var program = ClassicBPF()
        let ioctl = program.newLabel("ioctl"), openat = program.newLabel("openat"), open = program.newLabel("open")
        let modeIn = [1, 2, 3].map { program.newLabel("mode-in-\($0)") }
        let fcntl = program.newLabel("fcntl"), setpriority = program.newLabel("setpriority")
        let pidIn = [0, 1].map { program.newLabel("pid-in-\($0)") }
        let allow = program.newLabel("allow"), eperm = program.newLabel("eperm"), enosys = program.newLabel("enosys")
        let eacces = program.newLabel("eacces"), renameat2 = program.newLabel("renameat2")

        program.load(Field.arch)
        program.jump(if: .equal, seccomp_arch_native(), else: enosys)
        program.load(Field.nr)
        program.jump(if: .greaterOrEqual, 0x4000_0000, then: enosys)  // x32's numbers, on x86-64

        let dispatch: [(String, ClassicBPF.Label)] = [
            ("ioctl", ioctl),
            ("openat", openat), ("open", open), ("creat", modeIn[0]),
            ("mknodat", modeIn[1]), ("mknod", modeIn[0]), ("openat2", enosys),
            ("setpriority", setpriority), ("sched_setaffinity", pidIn[0]), ("sched_setscheduler", pidIn[0]),
            ("sched_setparam", pidIn[0]), ("sched_setattr", pidIn[0]), ("fcntl", fcntl), ("renameat2", renameat2),
        ]
        for (name, label) in dispatch {
            // arm64 has no open, creat or mknod: libseccomp names them by
            // negative stand-ins, which never match (the x32 test above
            // already refused every number from 0x4000_0000).
            guard let number = Self.number(name) else { continue }
            program.jump(if: .equal, UInt32(bitPattern: number), then: label)
        }
        program.ret(Self.allowAction)

        program.place(ioctl)
        program.load(Field.low(1))
        for request in IoctlRequest.terminalTakeover + IoctlRequest.attributeChange {
            program.jump(if: .equal, request, then: eperm)
        }
        var allowed = IoctlRequest.terminal + IoctlRequest.descriptor + IoctlRequest.file
        if options.networkClient || options.networkServer { allowed += IoctlRequest.networkQuery }
        for request in allowed {
            program.jump(if: .equal, request, then: allow)
        }
        program.ret(Self.errnoAction(ENOTTY))

        // Access mode 3 first: Landlock checks nothing for it (see
        // `accessModeThree`), so it is refused wherever the file is.
        let flagsIn = [(openat, UInt32(2), 2), (open, UInt32(1), 1)]
        for (label, argument, modeArgument) in flagsIn {
            program.place(label)
            program.load(Field.low(argument))
            program.and(Self.accessModeThree)
            program.jump(if: .equal, Self.accessModeThree, then: eacces)
            program.load(Field.low(argument))
            program.jump(if: .anyBitSet, Self.creatingOpenFlags, then: modeIn[modeArgument], else: allow)
        }
        for (argument, label) in zip([UInt32(1), 2, 3], modeIn) {
            program.place(label)
            program.load(Field.low(argument))
            program.jump(if: .anyBitSet, Self.setIDBits, then: eperm, else: allow)
        }

        // A lease on a file the command may only read (root's files under the
        // system paths, when root launches; a read-only grant) would make every
        // host process that opens it for writing wait, up to lease-break-time.
        // dnotify on a folder held open would go on telling the command of
        // changes there after the folder was taken away (inotify watches are
        // recorded and removed; dnotify is obsolete and has no way to remove
        // another process's): refused.
        let fcntlNotify = program.newLabel("fcntl-notify")
        program.place(fcntl)
        program.load(Field.low(1))
        program.jump(if: .equal, 1024, then: eperm, else: fcntlNotify)  // F_SETLEASE
        program.place(fcntlNotify)
        program.jump(if: .equal, 1026, then: eperm, else: allow)  // F_NOTIFY

        // RENAME_WHITEOUT leaves a 0:0 character device where the name was
        // (overlayfs's whiteout), which Landlock does not count as making
        // one: a device node in the user's vault is no file of theirs.
        program.place(renameat2)
        program.load(Field.low(4))
        program.jump(if: .anyBitSet, 4, then: eperm, else: allow)  // RENAME_WHITEOUT

        program.place(setpriority)
        program.load(Field.low(0))
        program.jump(if: .equal, 0, then: pidIn[1], else: eperm)  // PRIO_PROCESS; PRIO_USER 0 is every process of the uid
        for (argument, label) in zip([UInt32(0), 1], pidIn) {
            program.place(label)
            program.load(Field.low(argument))
            program.jump(if: .equal, 0, then: allow, else: eperm)
        }

        program.place(allow)
        program.ret(Self.allowAction)
        program.place(eperm)
        program.ret(Self.errnoAction(EPERM))
        program.place(enosys)
        program.ret(Self.errnoAction(ENOSYS))
        program.place(eacces)
        program.ret(Self.errnoAction(EACCES))
        return program
    }
}
