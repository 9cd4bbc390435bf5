@preconcurrency import Glibc
import Grants
import Sandbox
import SystemPackage

/// When a granted folder moved since its bookmark was made.
public enum StaleChoice: String, Sendable, CaseIterable {
    /// Refuse to launch, saying how to reconnect.
    case fail
    /// Open the picker again, on the folder's new place.
    case prompt
    /// Accept the folder with the same handle and rewrite the bookmark, as Apple tells apps to.
    case follow
}

/// When a grant's bookmark file does not exist yet.
public enum MissingChoice: String, Sendable, CaseIterable {
    case fail
    /// Ask the user once, and write the bookmark.
    case prompt
}

/// What the picker is asked to show.
public struct PickRequest: Sendable {
    public let app: AppID
    public let access: GrantAccess
    /// Where to start browsing, if not the picker's default.
    public let startingAt: FilePath?
    /// A folder in `startingAt` to put the cursor on (the one that moved there).
    public let highlighted: FilePath.Component?

    public init(app: AppID, access: GrantAccess, startingAt: FilePath? = nil, highlighted: FilePath.Component? = nil) {
        self.app = app
        self.access = access
        self.startingAt = startingAt
        self.highlighted = highlighted
    }
}

/// What `run --grant NAME=FILE` does, for any Swift program: resolve each
/// bookmark file, apply the stale and missing choices, rewrite the bookmark
/// safely, and return the Landlock rule built on the very descriptor that
/// resolution verified. The safety rules live here, in one place:
/// - bookmark files are read and replaced through `BookmarkFile`, so nothing
///   the app planted at or along their path is followed or waited on;
/// - replaced, missing, covered, inaccessible, revoked, wrong-app and invalid
///   bookmarks are never followed;
/// - a folder that has come to hold the broker's state is refused, and a
///   bookmark is rewritten only after the folder passed every check;
/// - the policy caps the access (`user-selected.read-only` downgrades).
public struct LaunchGrants {
    public let broker: GrantBroker
    public let app: AppID
    public let policy: Policy
    public var onStale: StaleChoice
    public var onMissing: MissingChoice
    /// Shows a picker the app does not control, and returns the folder the
    /// person chose, held open, or nil when they cancelled.
    public var picker: ((PickRequest) throws -> OwnedDescriptor?)?
    /// Told what happened that the user should know (a rewritten bookmark, a downgrade).
    public var notice: (LaunchGrantNotice) -> Void = { _ in }
    /// Which links on a bookmark file's path may be followed: none that any
    /// app (now or once) or another user could have planted.
    let trust: LinkTrust

    public init(
        broker: GrantBroker, app: AppID, policy: Policy, containerBase: String,
        onStale: StaleChoice = .fail, onMissing: MissingChoice = .fail,
        picker: ((PickRequest) throws -> OwnedDescriptor?)? = nil
    ) throws(GrantError) {
        self.broker = broker
        self.app = app
        self.policy = policy
        self.onStale = onStale
        self.onMissing = onMissing
        self.picker = picker
        trust = .of(broker, containerBase: containerBase)
    }

    /// Splits `NAME=FILE`; NAME is letters, digits and `_`, and is uppercased.
    public static func parse(_ spec: String) throws(GrantError) -> (name: String, file: String) {
        guard let equals = spec.firstIndex(of: "="), !spec[..<equals].isEmpty, equals != spec.index(before: spec.endIndex),
              spec[..<equals].allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) else {
            throw .grantSpecification(spec)
        }
        return (spec[..<equals].uppercased(), String(spec[spec.index(after: equals)...]))
    }

    /// Resolves the bookmark at `path` (absolute) for grant `name`: the rule
    /// for the launch and the variable that names the folder for the command.
    public func resolve(name: String, bookmark path: String) throws -> (rule: PathRule, variable: String) {
        let resolved = try resolveGrant(name: name, bookmark: path)
        return (resolved.rule, resolved.variable)
    }

    /// `resolve`, with the grant the rule is for (what the sandbox's record names).
    public func resolveGrant(name: String, bookmark path: String) throws -> (rule: PathRule, variable: String, grant: GrantID) {
        let resolved = try grant(name: name, bookmark: path)
        return (resolved.rule, resolved.variable, resolved.grant)
    }

    /// The same, as what `SandboxSession.launch(_:grants:)` takes.
    public func grant(name: String, bookmark path: String) throws -> ResolvedGrant {
        let fail = { (problem: LaunchGrantProblem) in LaunchGrantError(grant: name, file: path, problem: problem) }
        guard let allowed = GrantAccess.readWrite.pathAccess(allowedBy: policy) else {
            throw fail(.policyTakesNoGrants(policy: policy.source))
        }
        let file = try BookmarkFile(path: path, trust: trust)
        guard let blob = try file.read() else {
            guard onMissing == .prompt else {
                throw fail(.bookmarkMissing(app: app))
            }
            let access: GrantAccess = allowed == .readWrite ? .readWrite : .readOnly
            let issued = try pick(PickRequest(app: app, access: access, startingAt: nil, highlighted: nil), into: file, fail)
            return try rule(for: broker.resolve(issued.bookmark, app: app), bookmark: issued.bookmark, name: name, allowed: allowed, fail)
        }

        var resolution = try broker.resolve(blob, app: app)
        var current = blob
        switch (resolution.status, onStale) {
        case (.fresh, _) where !resolution.isStale:
            break
        case (.fresh, .follow), (.moved, .follow):
            // Checked before anything is written: a folder the launch would
            // refuse (protected, or not allowed) never gets a bookmark.
            var granted = try rule(for: resolution, bookmark: blob, name: name, allowed: allowed, fail)
            let renewed = try broker.renew(resolution, app: app)
            try file.replace(with: renewed)
            granted.bookmark = renewed
            notice(.rewritten(grant: name, message: resolution.message))
            return granted
        case (.fresh, _):
            notice(.stale(grant: name, message: resolution.message))
        case (.moved, .prompt):
            let request = PickRequest(
                app: app, access: resolution.access ?? .readOnly, startingAt: resolution.currentPath?.removingLastComponent(),
                highlighted: resolution.currentPath?.lastComponent)
            let issued = try pick(request, into: file, fail)
            resolution = try broker.resolve(issued.bookmark, app: app)
            current = issued.bookmark
        case (.moved, .fail):
            throw fail(.moved(message: resolution.message))
        default:
            // Replaced, missing, covered, inaccessible, revoked, wrong app and invalid are never followed.
            throw fail(.unusable(status: resolution.status, message: resolution.message))
        }
        return try rule(for: resolution, bookmark: current, name: name, allowed: allowed, fail)
    }

    /// Asks the person, grants what they chose and writes the bookmark.
    private func pick(_ request: PickRequest, into file: BookmarkFile, _ fail: (LaunchGrantProblem) -> LaunchGrantError) throws -> GrantBroker.Issued {
        guard let picker else { throw fail(.noPicker) }
        guard let folder = try picker(request) else { throw GrantError.cancelled }
        return try broker.grant(app: app, opened: folder, access: request.access) { bookmark in try file.replace(with: bookmark) }
    }

    private func rule(
        for resolution: BookmarkResolution, bookmark: [UInt8], name: String, allowed: Policy.PathAccess, _ fail: (LaunchGrantProblem) -> LaunchGrantError
    ) throws -> ResolvedGrant {
        guard resolution.status == .fresh || resolution.status == .moved, let folder = resolution.folder,
              let path = resolution.currentPath, let grant = resolution.grant else {
            throw fail(.unusable(status: resolution.status, message: resolution.message))
        }
        // Whether the folder has come to hold the broker's own state (or a
        // kernel interface) since it was granted is checked once, by the
        // plan, against the same protected folders (and by `renew` before a
        // moved folder's bookmark is rewritten).
        var granted = (resolution.access ?? .readOnly).pathAccess(allowedBy: policy) ?? .readOnly
        if resolution.access == .readWrite, allowed == .readOnly {
            notice(.downgraded(grant: name, policy: policy.source, path: path))
            granted = .readOnly
        }
        var resolved = ResolvedGrant(name: name, rule: PathRule(grant: name, path: path, descriptor: folder, access: granted), variable: "SANDBOX_GRANT_\(name)", grant: grant.id)
        resolved.bookmark = bookmark
        return resolved
    }
}

/// Why a grant could not be given at launch: typed, so that each front end
/// says how to set it right in its own terms (the CLI names its options).
public enum LaunchGrantProblem: Equatable, Sendable {
    /// The policy has no `com.apple.security.files.user-selected.*` entitlement.
    case policyTakesNoGrants(policy: String)
    /// No bookmark file yet, and missing ones are not to be asked for.
    case bookmarkMissing(app: AppID)
    /// A pick is needed and no picker was given.
    case noPicker
    /// The folder moved, and moves are not to be followed.
    case moved(message: String)
    /// Replaced, missing, covered, inaccessible, revoked, another app's, or invalid: never followed.
    case unusable(status: BookmarkStatus, message: String)
}

public struct LaunchGrantError: Error, Equatable, CustomStringConvertible, Sendable {
    public let grant: String
    /// The bookmark file, as given.
    public let file: String
    public let problem: LaunchGrantProblem

    public var description: String {
        let what = switch problem {
        case .policyTakesNoGrants(let policy):
            "policy \(policy) takes no user-selected folders (com.apple.security.files.user-selected.read-write or read-only)"
        case .bookmarkMissing: "no bookmark there yet"
        case .noPicker: "the folder must be picked again, and there is no picker to ask with"
        case .moved(let message): message
        case .unusable(let status, let message): "\(status.rawValue): \(message)"
        }
        return "grant \(grant) (\(file)): \(what)"
    }
}

/// What the user should hear of a launch's grants.
public enum LaunchGrantNotice: Equatable, Sendable, CustomStringConvertible {
    /// A moved folder was followed and its bookmark rewritten.
    case rewritten(grant: String, message: String)
    /// The bookmark is stale (an older key, say) and was not rewritten.
    case stale(grant: String, message: String)
    /// The policy allows user-selected folders read-only: a read-write grant is read-only.
    case downgraded(grant: String, policy: String, path: FilePath)

    public var description: String {
        switch self {
        case .rewritten(let grant, let message): "grant \(grant): \(message); bookmark rewritten"
        case .stale(let grant, let message): "grant \(grant): \(message)"
        case .downgraded(let grant, let policy, let path):
            "grant \(grant): policy \(policy) allows user-selected folders read-only; \(path) is read-only"
        }
    }
}
