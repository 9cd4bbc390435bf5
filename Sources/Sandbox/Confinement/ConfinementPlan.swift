@preconcurrency import Glibc
import CSandbox
import SystemPackage

/// Every rule, filter and string of one launch, built in the parent before
/// fork, so the child runs nothing but the C routine that applies them.
public final class ConfinementPlan: @unchecked Sendable {
    public let report: EnforcementReport
    public let container: AppContainer
    public let executable: String
    public let arguments: [String]
    /// `NAME=value` strings the command starts with.
    public let environment: [String]
    public let workingDirectory: String

    let request: LaunchRequest
    let ruleset: LandlockRuleset?
    let restrictFlags: UInt32
    let filter: [UInt8]?
    let terminalGuard: [UInt8]?
    let superviseMetadata: Bool
    /// The keeper's Landlock domain scopes signals (ABI 6): its kill(-1)
    /// then reaches the command's processes only. Without it, the keeper
    /// falls back to the process group and the orphans it inherits.
    let keeperScopesSignals: Bool
    let keeperRestrictFlags: UInt32
    /// Folders in which the supervisor may change metadata, pinned open.
    let writableRoots: [OwnedDescriptor]
    /// Everything the sandbox may read (system paths, container, grants),
    /// pinned open: where inotify watches may go.
    let readableRoots: [OwnedDescriptor]

    public static let sandboxPath = "/usr/local/bin:/usr/bin:/bin"

    public convenience init(_ request: LaunchRequest) throws(SandboxError) {
        try self.init(request, features: .probe())
    }

    /// `features` is what the kernel offers; tests pass an older kernel's.
    init(_ request: LaunchRequest, features: KernelFeatures) throws(SandboxError) {
        guard let name = request.command.first, !name.isEmpty else {
            throw .usage("no command given: put it after --, for example: sandboxed-run run --app com.example.memo -- /bin/sh")
        }
        self.request = request
        let policy = request.policy
        let protections = features.protections(for: policy)
        report = EnforcementReport(features: .init(landlockABI: features.landlockABI), protections: protections)
        if request.compatibility == .hardRequirement, !report.missing.isEmpty {
            throw .protectionUnavailable(missing: report.missing.map { "\($0.name): \($0.detail)" })
        }

        container = try AppContainer.current(for: request.app, base: request.containerBase)
        workingDirectory = request.workingDirectory ?? container.root
        executable = try Self.resolve(name)
        arguments = request.command
        environment = try Self.environment(for: request, container: container)

        let containerFolder = try FolderRule(
            name: "container", path: container.root, descriptor: Self.openVerified(container.root), access: .readWrite)
        let folders = [containerFolder] + request.folders
        writableRoots = folders.filter { $0.access == .readWrite }.map(\.descriptor)

        let systemPaths = Self.openSystemPaths(policy)
        readableRoots = systemPaths.map(\.descriptor) + folders.map(\.descriptor)
        let abi = min(features.landlockABI, Landlock.newestKnownABI)
        if abi >= 1 {
            ruleset = try Self.ruleset(abi: abi, policy: policy, folders: systemPaths + folders)
            restrictFlags = abi >= 7 ? CSB_LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON : 0
        } else {
            ruleset = nil
            restrictFlags = 0
        }
        keeperScopesSignals = abi >= 6
        // The keeper's kill(-1) is denied for every host process: not worth an audit record each.
        keeperRestrictFlags = abi >= 7 ? CSB_LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF : 0
        superviseMetadata = features.seccompUserNotification
        if features.seccompFilter {
            let options = SyscallFilter.Options(
                networkClient: policy.networkClient, networkServer: policy.networkServer,
                extraSyscalls: policy.extraSyscalls, superviseMetadata: superviseMetadata)
            filter = try SyscallFilter(options: options).compile()
            terminalGuard = SyscallFilter.terminalGuard()
        } else {
            filter = nil
            terminalGuard = nil
        }
    }

    /// Opens a folder as O_PATH, following symlinks: the fd is what gets verified and ruled.
    static func openVerified(_ path: String) throws(SandboxError) -> OwnedDescriptor {
        do {
            return OwnedDescriptor(taking: try syscallRetrying { csb_open_path(AT_FDCWD, path, 1) })
        } catch {
            throw .setup(step: "opening \(path)", errno: error)
        }
    }

    /// The policy's system paths that exist here, opened once: the same fds
    /// get the Landlock rules and pin the supervisor's readable roots.
    private static func openSystemPaths(_ policy: Policy) -> [FolderRule] {
        policy.systemPaths.compactMap { systemPath in
            // A path this system lacks (say /lib64 on arm64) only means less access.
            guard let fd = try? syscallRetrying({ csb_open_path(AT_FDCWD, systemPath.path, 1) }) else { return nil }
            return FolderRule(name: "system", path: systemPath.path, descriptor: OwnedDescriptor(taking: fd), access: systemPath.access)
        }
    }

    private static func ruleset(abi: Int, policy: Policy, folders: [FolderRule]) throws(SandboxError) -> LandlockRuleset {
        var network: Landlock.NetworkAccess = []
        if abi >= 4 {
            if !policy.networkClient || policy.tcpConnectPorts != nil { network.insert(.connectTCP) }
            if !policy.networkServer || policy.tcpBindPorts != nil { network.insert(.bindTCP) }
        }
        let scope: Landlock.Scope = abi >= 6 ? [.abstractUnixSocket, .signal] : []
        do {
            let ruleset = try LandlockRuleset(files: .handled(byABI: abi), network: network, scope: scope)
            for folder in folders {
                try ruleset.allow(access(folder.access), beneath: folder.descriptor)
            }
            if network.contains(.connectTCP) {
                for port in policy.tcpConnectPorts ?? [] { try ruleset.allow(.connectTCP, port: port) }
            }
            if network.contains(.bindTCP) {
                for port in policy.tcpBindPorts ?? [] { try ruleset.allow(.bindTCP, port: port) }
            }
            return ruleset
        } catch {
            throw .setup(step: "building the Landlock ruleset", errno: error)
        }

        func access(_ access: Policy.PathAccess) -> Landlock.FileAccess {
            switch access {
            case .readExecute: .readExecute
            case .readOnly: .readOnly
            case .readWrite: .readWrite
            }
        }
    }

    /// A path as given, or a name looked up in the sandbox's PATH.
    private static func resolve(_ name: String) throws(SandboxError) -> String {
        if name.contains("/") {
            var path = name
            if !name.hasPrefix("/") {
                guard let cwd = getcwd(nil, 0) else { throw .notFound(command: name) }
                defer { free(cwd) }
                path = String(cString: cwd) + "/" + name
            }
            guard access(path, F_OK) == 0 else { throw .notFound(command: name) }
            return path
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

    private static func environment(for request: LaunchRequest, container: AppContainer) throws(SandboxError) -> [String] {
        var variables: [String: String] = [
            "PATH": sandboxPath,
            "LANG": request.hostEnvironment["LANG"] ?? "C.UTF-8",
            "HOME": container.root,
            "TMPDIR": container.temporary,
            "SANDBOX_APP_ID": request.app.rawValue,
            "SANDBOX_CONTAINER": container.root,
        ]
        if let term = request.hostEnvironment["TERM"] { variables["TERM"] = term }
        for name in request.keptEnvironment {
            try validate(name)
            if let value = request.hostEnvironment[name] { variables[name] = value }
        }
        for (name, value) in request.environment {
            try validate(name)
            variables[name] = value
        }
        return variables.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }

        func validate(_ name: String) throws(SandboxError) {
            guard !name.isEmpty, !name.contains("="), !name.contains("\0") else {
                throw .usage("invalid environment variable name '\(name)': it must be non-empty and contain no '='")
            }
        }
    }
}
