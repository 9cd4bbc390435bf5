@preconcurrency import Glibc
import CSandbox
import CSeccomp
import SystemPackage

/// The seccomp-bpf filter: default deny, an allow-list of what real writers
/// need, explicit refusals for what breaks confinement, and the metadata
/// changes Landlock cannot see sent to the supervisor. Built with libseccomp
/// in the parent and exported as raw BPF, which the child loads with one
/// `seccomp(2)` call (libseccomp allocates, so it must not run after fork).
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
        // paths: Landlock mediates opening, creating, removing and renaming
        "open", "openat", "openat2", "creat", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs",
        "fstatfs", "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64",
        "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "rename", "renameat", "renameat2", "link",
        "linkat", "unlink", "unlinkat", "symlink", "symlinkat", "mknod", "mknodat", "umask",
        "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
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
        // processes and threads (clone is filtered below)
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
        for name in supervised {
            reasons[name] = "it is checked by the supervisor, never allowed blindly"
        }
        return reasons
    }()

    /// What tools answer best: "not implemented" makes them fall back.
    static let answeredWithENOSYS: Set<String> = ["io_uring_setup", "io_uring_enter", "io_uring_register", "clone3"]

    /// Changes to metadata that Landlock does not mediate: the supervisor
    /// performs them only beneath a writable folder (or they fail with EPERM
    /// when user notification is unavailable).
    static let metadataChanges: [String] = [
        "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat", "utime", "utimes",
        "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
        "fremovexattr",
    ]

    /// Watches that Landlock does not mediate: an inotify watch on a folder
    /// outside would report the names of files created there. The supervisor
    /// places them only beneath folders the sandbox may read.
    static let watches: [String] = ["inotify_add_watch"]

    /// Everything the supervisor decides.
    static var supervised: [String] { metadataChanges + watches }

    static func isKnown(_ name: String) -> Bool {
        seccomp_syscall_resolve_name(name) != __NR_SCMP_ERROR
    }

    struct Options {
        var networkClient = false
        var networkServer = false
        var extraSyscalls: [String] = []
        /// Send metadata changes and watches to a user-notification
        /// supervisor; when false they fail with EPERM everywhere.
        var superviseMetadata = true
    }

    let options: Options

    /// Builds the filter and returns it as raw `struct sock_filter` bytes.
    func compile() throws(SandboxError) -> [UInt8] {
        guard let context = seccomp_init(Self.errnoAction(Self.defaultErrno)) else {
            throw .setup(step: "seccomp_init", errno: .noMemory)
        }
        defer { seccomp_release(context) }
        try check(seccomp_attr_set(context, SCMP_FLTATR_ACT_BADARCH, Self.errnoAction(ENOSYS)), "seccomp_attr_set(badarch)")
        try check(seccomp_attr_set(context, SCMP_FLTATR_CTL_NNP, 0), "seccomp_attr_set(nnp)")

        for name in Self.allowed + options.extraSyscalls {
            try add(name, Self.allowAction)
        }
        for (name, _) in Self.neverAllowed where !Self.supervised.contains(name) {
            try add(name, Self.errnoAction(Self.answeredWithENOSYS.contains(name) ? ENOSYS : EPERM))
        }
        let metadataAction = options.superviseMetadata ? Self.notifyAction : Self.errnoAction(EPERM)
        for name in Self.supervised {
            try add(name, metadataAction)
        }
        try addConditionalRules()
        return try export(context)

        func add(_ name: String, _ action: UInt32, _ conditions: [scmp_arg_cmp] = []) throws(SandboxError) {
            let number = seccomp_syscall_resolve_name(name)
            guard number != __NR_SCMP_ERROR else { return }  // newer than libseccomp: stays denied
            // libseccomp refuses a rule that repeats the default action; the default does it.
            guard action != Self.errnoAction(Self.defaultErrno) else { return }
            var conditions = conditions
            let result = conditions.withUnsafeMutableBufferPointer { buffer in
                seccomp_rule_add_array(context, action, number, UInt32(buffer.count), buffer.baseAddress)
            }
            try check(result, "seccomp_rule_add(\(name))")
        }

        func addConditionalRules() throws(SandboxError) {
            // Terminal injection is refused by `terminalGuard`, a filter of its own:
            // libseccomp drops conditional rules next to an unconditional one.
            try add("ioctl", Self.allowAction)

            // Threads and processes, but no new namespaces.
            let namespaceFlags: UInt64 = 0x80 | 0x20000 | 0x0200_0000 | 0x0400_0000 | 0x0800_0000 | 0x1000_0000
                | 0x2000_0000 | 0x4000_0000
            try add("clone", Self.allowAction, [Self.compare(0, SCMP_CMP_MASKED_EQ, namespaceFlags, 0)])
            for bit in 0..<64 where namespaceFlags & (1 << UInt64(bit)) != 0 {
                let flag: UInt64 = 1 << UInt64(bit)
                try add("clone", Self.errnoAction(EPERM), [Self.compare(0, SCMP_CMP_MASKED_EQ, flag, flag)])
            }

            // Socket pairs only as streams: a datagram pair could sendto() a
            // pathname socket outside, which Landlock does not see before ABI 9.
            let socketTypeMask: UInt64 = 0xF
            for type: UInt64 in [1, 5] {  // SOCK_STREAM, SOCK_SEQPACKET
                try add("socketpair", Self.allowAction, [
                    Self.compare(0, SCMP_CMP_EQ, 1, 0), Self.compare(1, SCMP_CMP_MASKED_EQ, socketTypeMask, type),
                ])
            }
            try add("socketpair", Self.errnoAction(EACCES), [Self.compare(1, SCMP_CMP_MASKED_EQ, socketTypeMask, 2)])
            // New sockets: never AF_UNIX (connect() to a pathname socket is not
            // mediated by Landlock before ABI 9); IP only with a network entitlement.
            var deniedFamilies: [UInt64] = [1, 17]  // AF_UNIX, AF_PACKET
            if options.networkClient || options.networkServer {
                for family: UInt64 in [2, 10] {  // AF_INET, AF_INET6
                    try add("socket", Self.allowAction, [Self.compare(0, SCMP_CMP_EQ, family, 0)])
                }
                // NETLINK_ROUTE only, read by getaddrinfo() for AI_ADDRCONFIG.
                try add("socket", Self.allowAction, [Self.compare(0, SCMP_CMP_EQ, 16, 0), Self.compare(2, SCMP_CMP_EQ, 0, 0)])
                try add("socket", Self.errnoAction(EACCES), [Self.compare(0, SCMP_CMP_EQ, 16, 0), Self.compare(2, SCMP_CMP_NE, 0, 0)])
            } else {
                deniedFamilies += [2, 10, 16]
            }
            for family in deniedFamilies {
                try add("socket", Self.errnoAction(EACCES), [Self.compare(0, SCMP_CMP_EQ, family, 0)])
            }

            // Memory-backed files only if they can never become executable
            // (MFD_NOEXEC_SEAL): Landlock does not mediate executing them.
            let noExecSeal: UInt64 = 0x8
            try add("memfd_create", Self.allowAction, [Self.compare(1, SCMP_CMP_MASKED_EQ, noExecSeal, noExecSeal)])
            try add("memfd_create", Self.errnoAction(EACCES), [Self.compare(1, SCMP_CMP_MASKED_EQ, noExecSeal, 0)])

            // Resource limits and personality of oneself only.
            try add("prlimit64", Self.allowAction, [Self.compare(0, SCMP_CMP_EQ, 0, 0)])
            for persona: UInt64 in [0, 0xFFFF_FFFF] {
                try add("personality", Self.allowAction, [Self.compare(0, SCMP_CMP_EQ, persona, 0)])
            }
        }
    }

    /// The ioctl requests that push input into a terminal: TIOCSTI and TIOCLINUX.
    static let terminalInjection: [UInt32] = [0x5412, 0x541C]

    /// A second, hand-written filter: EPERM for `ioctl` with a terminal
    /// injection request, compared on the low 32 bits only, as the kernel
    /// reads it (a 64-bit compare let `TIOCSTI | 1 << 32` through in
    /// CVE-2019-10063). libseccomp cannot say "any value but these" on a
    /// masked argument, so this is six instructions of classic BPF. The
    /// kernel runs every filter and keeps the strictest answer.
    static func terminalGuard() -> [UInt8] {
        let load: UInt16 = 0x20  // BPF_LD | BPF_W | BPF_ABS
        let jumpIfEqual: UInt16 = 0x15  // BPF_JMP | BPF_JEQ | BPF_K
        let ret: UInt16 = 0x06  // BPF_RET | BPF_K
        let ioctl = UInt32(bitPattern: seccomp_syscall_resolve_name("ioctl"))
        // struct seccomp_data: nr at 0, arch at 4, args[1] at 24 (low word, little-endian).
        let program: [(UInt16, UInt8, UInt8, UInt32)] = [
            (load, 0, 0, 4),
            (jumpIfEqual, 0, 5, seccomp_arch_native()),
            (load, 0, 0, 0),
            (jumpIfEqual, 0, 3, ioctl),
            (load, 0, 0, 24),
            (jumpIfEqual, 2, 0, terminalInjection[0]),
            (jumpIfEqual, 1, 0, terminalInjection[1]),
            (ret, 0, 0, allowAction),
            (ret, 0, 0, errnoAction(EPERM)),
        ]
        var bytes: [UInt8] = []
        for (code, jt, jf, k) in program {
            withUnsafeBytes(of: code.littleEndian) { bytes += $0 }
            bytes += [jt, jf]
            withUnsafeBytes(of: k.littleEndian) { bytes += $0 }
        }
        return bytes
    }

    private func export(_ context: scmp_filter_ctx) throws(SandboxError) -> [UInt8] {
        let memfd = csb_memfd_create("seccomp-bpf")
        guard memfd >= 0 else { throw .setup(step: "memfd_create", errno: Errno(rawValue: errno)) }
        let file = OwnedDescriptor(taking: memfd)
        try check(seccomp_export_bpf(context, file.rawValue), "seccomp_export_bpf")
        let size = Int(lseek(file.rawValue, 0, SEEK_END))
        guard size > 0, size % 8 == 0 else { throw .setup(step: "seccomp_export_bpf", errno: .ioError) }
        var program = [UInt8](repeating: 0, count: size)
        let read = program.withUnsafeMutableBytes { pread(file.rawValue, $0.baseAddress, size, 0) }
        guard read == size else { throw .setup(step: "reading the seccomp filter", errno: .ioError) }
        return program
    }

    private func check(_ result: CInt, _ step: String) throws(SandboxError) {
        // libseccomp returns -errno rather than setting errno.
        if result < 0 { throw .setup(step: step, errno: Errno(rawValue: -result)) }
    }

    static let allowAction: UInt32 = 0x7FFF_0000  // SCMP_ACT_ALLOW
    static let notifyAction: UInt32 = 0x7FC0_0000  // SCMP_ACT_NOTIFY
    static func errnoAction(_ code: CInt) -> UInt32 { 0x0005_0000 | (UInt32(code) & 0xFFFF) }  // SCMP_ACT_ERRNO

    static func compare(_ argument: UInt32, _ op: scmp_compare, _ a: UInt64, _ b: UInt64) -> scmp_arg_cmp {
        scmp_arg_cmp(arg: argument, op: op, datum_a: a, datum_b: b)
    }
}
