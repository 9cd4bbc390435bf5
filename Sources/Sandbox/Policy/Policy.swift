import Egress
/// What a confined program may touch, decided before it starts.
///
/// The vocabulary follows Apple's App Sandbox entitlements where one exists,
/// so a macOS `.entitlements` file is a valid policy; `org.sandboxed-run.*`
/// keys add what Linux needs (system paths, extra syscalls, TCP ports).
public struct Policy: Equatable, Sendable {
    /// How a path may be used inside the sandbox.
    public enum PathAccess: String, Sendable, CaseIterable {
        case readExecute = "read-execute"
        case readOnly = "read-only"
        case readWrite = "read-write"
    }

    public struct SystemPath: Equatable, Sendable {
        public let path: String
        public let access: PathAccess
    }

    /// Where the policy came from, for messages.
    public var source: String
    public var version: Int = 1
    /// `com.apple.security.files.user-selected.*`: the most a user grant may
    /// give. `nil` means the app may not receive user-selected folders.
    public var userSelectedAccess: PathAccess?
    /// `com.apple.security.files.bookmarks.app-scope`: the command may make
    /// bookmarks of the folders it is given and open them again while it
    /// runs (`$SANDBOXED_RUN start-accessing`, live grants).
    public var bookmarksAppScope = false
    /// `com.apple.security.network.client`: outgoing TCP and UDP (DNS).
    public var networkClient = false
    /// `com.apple.security.network.server`: listening on TCP ports.
    public var networkServer = false
    /// `org.sandboxed-run.network.tcp-connect-ports`: if set, connections
    /// are limited to these ports (Landlock ABI 4).
    public var tcpConnectPorts: [UInt16]?
    /// `org.sandboxed-run.network.tcp-bind-ports`: if set, listening is
    /// limited to these ports.
    public var tcpBindPorts: [UInt16]?
    /// `org.sandboxed-run.network.allowed-hosts` (or `run --allow-host`): if
    /// set, the command reaches only these hosts, through the launcher's
    /// proxy, from a network namespace of its own; whatever the entitlements
    /// say. Needs the private view. Empty: no host at all.
    public var allowedHosts: [AllowedHost]?
    public var systemPaths: [SystemPath] = []
    /// `org.sandboxed-run.syscalls.allow`: syscalls the writer needs beyond
    /// the built-in allow-list. Syscalls that break confinement are refused.
    public var extraSyscalls: [String] = []
    /// `org.sandboxed-run.files.symbolic-links`: the command may create
    /// symbolic links in its container and read-write folders. Off by
    /// default: a link an app plants in a vault outlives its grant, and any
    /// tool the user later points at that vault may follow it (the
    /// unconfined commands refuse links where an app could ever write, as far
    /// as the state knows; a folder copied or moved out of a vault is beyond
    /// what it can know). Tools that make links (venv, npm, git) need it on.
    public var symbolicLinks = false
    /// `org.sandboxed-run.files.execute`: the command may execute files in
    /// its container and its grants (read-write and read-only), as it may in
    /// the policy's read-execute system paths. Off by default. The right
    /// adds no reach: what runs stays in the same Landlock domain and
    /// seccomp filter, without capabilities, and no_new_privs makes the
    /// kernel ignore set-id bits and file capabilities; code there can run
    /// without it anyway, through an interpreter or the dynamic loader.
    /// What it changes is that `execve` of a file the command wrote, or the
    /// user gave it, works: a venv's `bin/pip`, `./app` after `make`.
    public var executeFiles = false
    /// `org.sandboxed-run.files.review`: every change the command makes in
    /// its read-write launch grants is staged (a clone of the folder bound
    /// in its place), and reaches the folder only when the person accepts it
    /// (`sandboxed-run review`). As `run --review`.
    public var reviewChanges = false
    /// `org.sandboxed-run.limits`: resource limits set, soft and hard, in the
    /// command before it starts (never above what the launcher has).
    public var limits: [ResourceLimit: UInt64] = [:]
    /// Keys that were understood but ignored, or unknown: shown, never fatal.
    public var warnings: [String] = []

    public init(source: String) {
        self.source = source
    }
}

/// A resource limit a policy may set, by its name in `org.sandboxed-run.limits`.
public enum ResourceLimit: String, Sendable, CaseIterable, Comparable {
    /// RLIMIT_CORE, bytes of a core dump: 0, none (a dump can go to a host
    /// helper that runs as root outside the sandbox, when core_pattern is a pipe).
    case core
    /// RLIMIT_MEMLOCK, bytes of memory mlock() can pin, out of the host's reach.
    case memlock
    /// RLIMIT_NICE: how far the command may raise its priority (20 - value is
    /// the lowest nice value); 0, not above the user's other processes.
    case nice
    /// RLIMIT_NPROC: processes and threads the command may add to those its
    /// user runs at launch (the kernel counts every process of the user).
    case nproc
    /// RLIMIT_RTPRIO: the highest real-time priority (SCHED_FIFO, SCHED_RR)
    /// the command may take; 0, none, so it cannot starve the host.
    case rtprio

    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }

    /// The RLIMIT_* number.
    public var resource: Int32 {
        switch self {
        case .core: 4
        case .memlock: 8
        case .nice: 13
        case .nproc: 6
        case .rtprio: 14
        }
    }
}

