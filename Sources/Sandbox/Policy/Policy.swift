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
    public var systemPaths: [SystemPath] = []
    /// `org.sandboxed-run.syscalls.allow`: syscalls the writer needs beyond
    /// the built-in allow-list. Syscalls that break confinement are refused.
    public var extraSyscalls: [String] = []
    /// Keys that were understood but ignored, or unknown: shown, never fatal.
    public var warnings: [String] = []

    public init(source: String) {
        self.source = source
    }
}

/// A policy file that cannot be used: names the file, the key and the problem.
public struct PolicyError: Error, Equatable, Sendable, CustomStringConvertible {
    public let file: String
    public let key: String?
    public let problem: String

    public init(file: String, key: String?, problem: String) {
        self.file = file
        self.key = key
        self.problem = problem
    }

    public var description: String {
        if let key {
            "policy \(file): key '\(key)': \(problem)"
        } else {
            "policy \(file): \(problem)"
        }
    }
}
