@preconcurrency import Glibc
@_exported import Grants
@_exported import Sandbox
@_exported import Staging
import SystemPackage

/// The trust boundary of sandboxed-run, owned in one place, so that the CLI
/// and a Swift program get the same guarantees by default:
/// - where the broker's state and the app containers are (from the
///   environment it is given, or named), and that no rule of any launch may
///   expose either (`protectedFolders`, always both);
/// - which folders an app can write or once could, with one fail-closed rule
///   (`linkTrust`): a state that cannot be read trusts no link;
/// - which policy files may be read (none an app or another user could
///   have written), and recording a policy's read-write folders before a
///   launch makes them writable;
/// - launching with grants (`launchGrants`), and the paths unconfined
///   commands walk (`folder(_:)`, `file(_:)`).
/// Below this type nothing knows an environment variable, a default path or
/// a CLI option.
public struct SandboxSession: Sendable {
    /// The broker's state folder (keys and ledger).
    public let stateDirectory: String
    /// Where app containers live.
    public let containerBase: String
    /// The launcher's environment: the source of the command's LANG, TERM
    /// and kept variables.
    public let environment: [String: String]

    /// The default locations, derived from `environment` (the launcher's own,
    /// as the CLI passes it): `$XDG_STATE_HOME/sandboxed-run` or
    /// `~/.local/state/sandboxed-run`, and `$XDG_DATA_HOME/sandboxed-run` or
    /// `~/.local/share/sandboxed-run`.
    public init(environment: [String: String]) throws(SandboxSessionError) {
        guard let state = Self.location(environment, "XDG_STATE_HOME", ".local/state"),
              let data = Self.location(environment, "XDG_DATA_HOME", ".local/share") else {
            throw .noHome
        }
        self.init(stateDirectory: state + "/sandboxed-run", containerBase: data + "/sandboxed-run", environment: environment)
    }

    /// Named locations (absolute paths).
    public init(stateDirectory: String, containerBase: String, environment: [String: String]) {
        self.stateDirectory = stateDirectory
        self.containerBase = containerBase
        self.environment = environment
    }

    private static func location(_ environment: [String: String], _ variable: String, _ underHome: String) -> String? {
        if let value = environment[variable], value.hasPrefix("/") { return value }
        guard let home = environment["HOME"], home.hasPrefix("/") else { return nil }
        return home + "/" + underHome
    }

    /// Folders no rule may expose, whatever a policy or grant says: the
    /// broker's state (it holds the sealing keys and the records of running
    /// sandboxes) and every app's container.
    public var protectedFolders: [String] { [stateDirectory, containerBase] }

    /// The records of running sandboxes: `running/` in the state folder,
    /// runtime state (written once, never synced; the boot id in each names
    /// a launcher of this boot only). Not in a runtime folder an environment
    /// variable names: one inside a container or a grant would let the
    /// command rewrite the records (and have `revoke --end-holders` signal
    /// any process of the user), and a launcher and a `revoke` that saw
    /// different variables would not see each other's sandboxes.
    public func runningSandboxes() throws(GrantError) -> RunningSandboxes {
        RunningSandboxes(folder: try StateDirectory(path: stateDirectory))
    }

    // MARK: The broker and links

    /// The broker over this session's state (made at the first grant).
    public func broker() throws(GrantError) -> GrantBroker {
        try GrantBroker(state: try StateDirectory(path: stateDirectory), protectedFolders: [containerBase])
    }

    /// The one rule for the links an unconfined process may follow (see
    /// `LinkTrust`): none where any app could write, now or once, or where
    /// another user could; no state yet means no grant was ever made; a state
    /// that cannot be read trusts no link.
    public func linkTrust() -> LinkTrust {
        .ofState(stateDirectory, containerBase: containerBase)
    }

    /// A folder a person named for an unconfined command, walked with
    /// `linkTrust()`: `fail` turns a problem into the caller's error.
    public func folder<Failure: Error>(_ path: FilePath, describe fail: (String) -> Failure) throws(Failure) -> OwnedDescriptor {
        try SafeWalk.openFolder(path, trust: linkTrust(), describe: fail)
    }

    // MARK: Policies

    /// A shipped policy by name, or a policy file, read only if no app (now
    /// or once) and no other user could have written it. nil: the default.
    public func policy(named choice: String?) throws(SandboxError) -> Policy {
        let name = choice ?? Policy.defaultName
        if !name.contains("/"), let builtin = Policy.builtin(named: name) { return builtin }
        return try Policy(contentsOfFile: name, trust: linkTrust())
    }

    /// Records each folder `policy` makes writable (its read-write system
    /// paths that are folders) before a launch does: links an app plants
    /// there are then never followed by an unconfined command. Nothing is
    /// written when there is none, as in every shipped policy.
    public func recordWritableFolders(of policy: Policy) throws(GrantError) {
        let folders = policy.systemPaths.contains { path in
            var status = stat()
            return path.access == .readWrite && stat(path.path, &status) == 0 && status.st_mode & S_IFMT == S_IFDIR
        }
        if folders { try broker().recordWritableSystemFolders(of: policy) }
    }

    // MARK: Launching

    /// A launch request for `app` with this session's protected folders and
    /// container base; the policy's writable folders are recorded first.
    public func launchRequest(app: AppID, policy: Policy, command: [String]) throws -> LaunchRequest {
        try recordWritableFolders(of: policy)
        return LaunchRequest(
            app: app, policy: policy, command: command, containerBase: containerBase, protectedFolders: protectedFolders,
            hostEnvironment: environment)
    }

    /// What `run --grant` does for `app`: bookmark files walked with
    /// `linkTrust()`, the stale and missing choices, the protected folders.
    public func launchGrants(
        app: AppID, policy: Policy, onStale: StaleChoice = .fail, onMissing: MissingChoice = .fail,
        picker: ((PickRequest) throws -> OwnedDescriptor?)? = nil
    ) throws -> LaunchGrants {
        try LaunchGrants(broker: broker(), app: app, policy: policy, containerBase: containerBase,
                         onStale: onStale, onMissing: onMissing, picker: picker)
    }

    /// A bookmark file of any app's, walked as every unconfined path is.
    public func bookmarkFile(_ path: String, broker: GrantBroker) throws(GrantError) -> BookmarkFile {
        try BookmarkFile(path: path, trust: .of(broker, containerBase: containerBase))
    }
}

/// Why a session could not be made.
public enum SandboxSessionError: Error, Equatable, CustomStringConvertible, Sendable {
    /// Neither XDG_STATE_HOME/XDG_DATA_HOME nor HOME is an absolute path.
    case noHome

    public var description: String {
        switch self {
        case .noHome:
            "neither XDG_STATE_HOME and XDG_DATA_HOME nor HOME is set to an absolute path: set HOME so sandboxed-run knows where its state and the app containers live"
        }
    }
}
