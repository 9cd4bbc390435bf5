@preconcurrency import Glibc
import SystemPackage

/// A path the sandbox may use: one of the policy's system paths (a file or a
/// folder), the launcher's own executable, the app's container, a user's
/// grant, or a mount of the sandbox's own. It holds the O_PATH fd that was
/// verified, and the Landlock rule is added through that very fd, so nothing
/// can swap the path between check and confinement. A staged grant's rules
/// go to its clone instead (see `staged`).
public struct PathRule: Sendable {
    /// Where a rule comes from: what a message or a check says of it.
    public enum Origin: Sendable, Equatable {
        case system
        case launcher
        case container
        /// A mount the keeper made for the sandbox (/proc, /dev/shm).
        case namespace
        /// A user's grant, by the name the command knows it by (`SANDBOX_GRANT_<NAME>`).
        case grant(String)
    }

    public let origin: Origin
    /// The path where it was found, for messages and the environment.
    public let path: FilePath
    public let descriptor: OwnedDescriptor
    public let access: Policy.PathAccess
    /// For a file, the folder it was opened in by name, when known: its
    /// ancestry is then walked from there, with no lookup of its name.
    let folder: OwnedDescriptor?
    /// What fstat said of `descriptor` when it was opened, when it was asked.
    let inode: Ancestry.Inode?
    /// A staged grant's clone (a folder, opened O_PATH): the command finds
    /// it at `path`, in the granted folder's place, and every rule of the
    /// grant binds to it, so its changes wait there for review and the
    /// folder itself stays untouched. Private view only. `descriptor` is
    /// still the granted folder: what the protected-folder and place checks
    /// judge. Nil for anything else; only a grant can be staged.
    public let staged: OwnedDescriptor?

    /// A user's grant.
    public init(grant name: String, path: FilePath, descriptor: OwnedDescriptor, access: Policy.PathAccess) {
        self.init(origin: .grant(name), path: path, descriptor: descriptor, access: access)
    }

    /// A user's grant, staged: the command works on `clone` at `path`.
    /// `clone` may lie in the broker's state (its one way into a sandbox),
    /// but must not hold any protected folder, nor the granted folder.
    /// The one initializer that sets `staged`: no other origin can have it.
    public init(grant name: String, path: FilePath, descriptor: OwnedDescriptor, access: Policy.PathAccess, stagedIn clone: OwnedDescriptor) {
        origin = .grant(name)
        self.path = path
        self.descriptor = descriptor
        self.access = access
        folder = nil
        inode = nil
        staged = clone
    }

    init(origin: Origin, path: FilePath, descriptor: OwnedDescriptor, access: Policy.PathAccess, folder: OwnedDescriptor? = nil, inode: Ancestry.Inode? = nil) {
        self.origin = origin
        self.path = path
        self.descriptor = descriptor
        self.access = access
        self.folder = folder
        self.inode = inode
        staged = nil
    }

    /// What the command reaches at `path`, and what the rule's Landlock
    /// rights and the supervisor's roots bind to: the clone of a staged grant.
    var exposed: OwnedDescriptor { staged ?? descriptor }

    /// The grant's name, nil for any other origin.
    public var grantName: String? {
        if case .grant(let name) = origin { return name }
        return nil
    }

    /// For people: "the app's container", "grant VAULT", ...
    public var shownName: String {
        switch origin {
        case .system, .launcher: "the policy's system path \(Printable.path(path))"
        case .container: "the app's container"
        case .namespace: "the sandbox's own \(Printable.path(path))"
        case .grant(let name): staged == nil ? "grant \(name)" : "grant \(name) (staged)"
        }
    }
}

/// Everything needed to start one confined command.
public struct LaunchRequest: Sendable {
    public var app: AppID
    public var policy: Policy
    /// How the network proxy resolves allowed names (`policy.allowedHosts`):
    /// nil, the system's resolver; a fixed table is a testing aid (as curl's
    /// `--resolve`), which changes where allowed names lead, never which.
    public var egressResolver: Resolver?
    /// The command and its arguments; the first is a path or a name looked up in the sandbox's PATH.
    public var command: [String]
    /// Where app containers live (see `AppContainer.defaultBase`).
    public var containerBase: String
    /// The launcher's environment: the source of LANG, TERM and `keptEnvironment`.
    public var hostEnvironment: [String: String]
    /// Folders beyond the container, such as the user's grants.
    public var folders: [PathRule] = []
    /// Variables to set in the sandbox (`--setenv`), applied last.
    public var environment: [String: String] = [:]
    /// Variables whose values are paths, such as `SANDBOX_GRANT_<NAME>`:
    /// passed as the path's bytes, which need not be UTF-8.
    public var pathVariables: [String: FilePath] = [:]
    /// Names of host variables to pass through (`--keep-env`).
    public var keptEnvironment: [String] = []
    /// Descriptors beyond 0, 1, 2 that stay open in the command (`--keep-fd`).
    public var keptDescriptors: [CInt] = []
    /// Defaults to the container's root, which is also HOME. It must lie
    /// within what the sandbox can read; a relative command is found from it.
    public var workingDirectory: String?
    /// Folders no rule may expose: the broker's state and the app containers.
    /// A system path or granted folder that holds one, or lies inside one, is
    /// refused (the app's own container is the one exception). Required: a
    /// request names them (`SandboxSession.launchRequest` always does).
    public var protectedFolders: [String]
    public var compatibility: CompatibilityLevel = .hardRequirement
    /// The descriptors that become the command's stdin, stdout and stderr.
    public var standardInput: CInt = 0
    public var standardOutput: CInt = 1
    public var standardError: CInt = 2
    /// Kill the command, and every process it started, if the launcher dies
    /// or drops the `ConfinedProcess` without waiting for it.
    public var dieWithParent = true
    /// Whether the command gets a pseudo-terminal of its own when one of its
    /// stdin, stdout and stderr is a terminal (see `TerminalChoice`).
    public var terminal: TerminalChoice = .automatic
    /// Let the command run the launcher's own executable (read and execute
    /// on that file and the libraries it loaded from outside the system
    /// paths, nothing else), as `$SANDBOXED_RUN`: for `$SANDBOXED_RUN append`.
    public var exposeLauncher = true
    /// Start the command in pid and mount namespaces of its own, when the
    /// kernel consents, for a private /dev/shm and a /proc that shows only
    /// the sandbox's processes (see `ConfinedProcess.namespaces`).
    public var privateNamespaces = true
    /// The tree the command sees: a private view by default, which needs
    /// `privateNamespaces` and a kernel that lets the keeper mount (in a
    /// user namespace of its own, for anyone but root). Where it cannot be
    /// built the launch fails with `SandboxError.viewUnavailable`, or, with
    /// `compatibility = .bestEffort`, runs in the host view
    /// (`ConfinedProcess.view` and `.viewNotice` say so), unless a grant is
    /// staged (`PathRule.staged`): that launch needs the private view.
    public var view: FileSystemView = .private
    /// With those namespaces, make every mount read-only but the writable
    /// folders, so that the kernel itself refuses chmod, chown, utimes and
    /// xattr writes outside them (EROFS) and the command makes them at
    /// native speed inside, without the supervisor. Used only when it is
    /// sound: see `ConfinedProcess.Namespaces.readOnlyMounts`. False: the
    /// supervisor decides every such call (and answers EPERM outside).
    public var readOnlyMounts = true
    /// `--explain`: each denial, explained, on this descriptor (the
    /// launcher's stderr) while the command runs. Nil: none printed.
    public var explainDenials: CInt?
    /// `--denials FILE`: a JSON-lines log opened with `DenialLog.open`;
    /// refused at launch when the sandbox could reach it.
    public var denialLog: OwnedDescriptor?
    /// `--denials-limit`: the most that log may hold, in bytes.
    public var denialLogBytes = DenialReporter.defaultLogBytes
    /// Live grants: a broker socket in the command (only when the policy
    /// has a `com.apple.security.files.user-selected.*` key), and with
    /// `.attach` in the private view the area folders are attached to
    /// while the command runs (see `ConfinementPlan.liveGrants`).
    public var liveGrants: LiveGrantSupport = .none

    /// Refuses a descriptor to keep that is not open. It must run before the
    /// launcher opens anything of its own: later, a number the caller never
    /// opened could name one of the launcher's (a folder, a library) and
    /// hand it to the command. `ConfinementPlan` checks first thing; a
    /// caller that opens files before it (a policy, a grant) checks earlier.
    public static func checkKept(_ descriptors: [CInt]) throws(SandboxError) {
        for fd in descriptors where fd > 2 && fcntl(fd, F_GETFD) < 0 {
            throw .descriptorNotOpen(fd)
        }
    }

    /// `protectedFolders`: at least the broker's state folder and
    /// `containerBase` (see `SandboxSession`, which fills them).
    public init(
        app: AppID, policy: Policy, command: [String], containerBase: String, protectedFolders: [String],
        hostEnvironment: [String: String]
    ) {
        self.app = app
        self.policy = policy
        self.command = command
        self.containerBase = containerBase
        self.protectedFolders = protectedFolders
        self.hostEnvironment = hostEnvironment
    }
}

/// A confined command with the user's terminal could change its settings
/// and line discipline (TCSETS, TIOCSETD), which outlive the command.
public enum TerminalChoice: Sendable {
    /// When any of stdin, stdout and stderr is a terminal, the command gets a
    /// pty of its own in their place (and as its controlling terminal), which
    /// `ConfinedProcess.wait()` relays to the user's terminal, as sudo's
    /// use_pty does. Non-terminal descriptors pass through unchanged.
    case automatic
    /// Hand the descriptors over as they are, terminals included.
    case never
}
