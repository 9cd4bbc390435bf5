@preconcurrency import Glibc
import Coordination
import Grants
import Sandbox
import Staging
import SystemKit
import SystemPackage

/// One grant's staged changes, held for review (its staging area locked:
/// no staged run of the same grant starts meanwhile), with what the grant
/// resolves to now. What `sandboxed-run review` works on, for any Swift program.
public final class StagedReview: @unchecked Sendable {
    public let area: StagingArea
    /// The grant as it was staged (its name, its path then, its bookmark).
    public let staged: StagedGrant
    /// What the bookmark resolves to now: only `fresh` applies anything.
    public let resolution: BookmarkResolution
    private let folder: OwnedDescriptor?

    init(area: StagingArea, staged: StagedGrant, resolution: BookmarkResolution) {
        self.area = area
        self.staged = staged
        self.resolution = resolution
        folder = resolution.status == .fresh ? (try? resolution.folder?.reopenedFolder()) ?? nil : nil
    }

    /// The folder's path for people: where it is now, or where it was staged.
    public var path: FilePath { resolution.status == .fresh ? resolution.currentPath ?? staged.path : staged.path }

    /// Every staged change, sorted by path.
    public func changes() throws(StagingError) -> [StagedChange] {
        try area.changes(host: folder).changes
    }

    /// A unified diff of the changes `paths` names (all when nil): text
    /// files as `git apply` and `patch -p1` take them, relative to the
    /// folder; binary and oversized files as one summary line each. None
    /// when the grant is not fresh now: without the folder to read, every
    /// file would look added.
    public func diff(_ paths: [[UInt8]]? = nil) throws(StagingError) -> [UInt8] {
        guard resolution.status == .fresh, folder != nil else {
            throw .grantUnusable(grant: "\(staged.name) (\(staged.grant))", status: resolution.status.rawValue, message: resolution.message)
        }
        let all = try changes()
        let chosen = try StagingArea.select(all, paths)
        var out: [UInt8] = []
        for change in chosen where change.item == .file || change.item == .link {
            let oldPath = change.from ?? change.path
            let old: [UInt8]? = change.kind == .added ? nil : try hostBytes(oldPath, kind: change.item)
            let new: [UInt8]? = change.kind == .deleted ? nil : try area.stagedBytes(change.path, limit: UnifiedDiff.Limits.default.maxBytes + 1)
            switch UnifiedDiff.make(old: old, new: new, oldName: oldPath, newName: change.path) {
            case .identical:
                if change.kind == .renamed {
                    out += Array("rename \(Printable.path(bytes: oldPath)) => \(Printable.path(bytes: change.path))\n".utf8)
                } else if let newMode = change.newMode, change.oldMode != newMode {
                    out += Array("mode \(String(change.oldMode ?? 0, radix: 8)) => \(String(newMode, radix: 8)) \(Printable.path(bytes: change.path))\n".utf8)
                }
            case .text(let text): out += text
            case .binary(let summary), .tooLarge(let summary): out += Array((summary + "\n").utf8)
            }
        }
        return out
    }

    private func hostBytes(_ path: [UInt8], kind: ItemKind) throws(StagingError) -> [UInt8]? {
        guard let folder else { return nil }
        return try StagingArea.regularFileBytes(path, in: folder, limit: UnifiedDiff.Limits.default.maxBytes + 1)
    }

    /// Applies the changes `paths` names (all when nil) as a coordinated
    /// writer. Applies nothing, and says why, when the grant is not fresh now
    /// (revoked, moved, replaced, covered, missing...).
    public func accept(_ paths: [[UInt8]]? = nil, coordinator: FileCoordinator = FileCoordinator()) throws(StagingError) -> [ReviewOutcome] {
        guard resolution.status == .fresh, let folder else {
            throw .grantUnusable(grant: "\(staged.name) (\(staged.grant))", status: resolution.status.rawValue, message: resolution.message)
        }
        return try area.accept(paths, host: folder, hostPath: path, coordinator: coordinator, savingComputer: "sandboxed-run review (\(staged.app.rawValue))")
    }

    /// Throws away the changes `paths` names (all when nil).
    public func reject(_ paths: [[UInt8]]? = nil) throws(StagingError) -> [ReviewOutcome] {
        try area.reject(paths, host: folder)
    }
}

extension SandboxSession {
    /// Every grant of `app` with staged changes, each held for review.
    /// A grant staged by a running sandbox is `StagingError.busy`.
    public func stagedReviews(app: AppID, broker: GrantBroker? = nil) throws -> [StagedReview] {
        let broker = try broker ?? self.broker()
        var reviews: [StagedReview] = []
        for grant in try StagingArea.staged(state: broker.state, app: app) {
            guard let area = try StagingArea.open(state: broker.state, app: app, grant: grant, create: false), area.hasClone else { continue }
            guard let staged = try area.stagedGrant() else { throw StagingError.damaged(file: "grant", problem: "it is missing") }
            // A launcher killed before it flushed: what the command wrote is made durable before it is shown.
            try area.flush()
            let resolution = try broker.resolve(staged.bookmark, app: app)
            reviews.append(StagedReview(area: area, staged: staged, resolution: resolution))
        }
        return reviews
    }
}

extension RunningSandbox {
    /// Its staged grants, for review once the command has ended (their
    /// areas are this sandbox's, still locked; each bookmark resolved again).
    public func stagedReviews(broker: GrantBroker) throws -> [StagedReview] {
        try stagedGrants.compactMap { grant in
            guard let area = grant.staging, area.hasClone, let staged = try area.stagedGrant() else { return nil }
            return StagedReview(area: area, staged: staged, resolution: try broker.resolve(staged.bookmark, app: staged.app))
        }
    }
}

extension LaunchGrants {
    /// Stages a read-write launch grant: its folder is cloned into the
    /// broker's state (or the clone there is reused: a later run builds on
    /// the staged changes), and the command gets the clone in the folder's
    /// place. The staging area stays locked while the returned grant lives
    /// (its `staging`): two staged runs of one grant never share it. A
    /// read-only grant is returned as it is: it cannot change anything.
    public func stage(_ resolved: ResolvedGrant) throws -> ResolvedGrant {
        guard resolved.rule.access == .readWrite else { return resolved }
        guard let bookmark = resolved.bookmark else {
            throw StagingError.cannotStage(path: resolved.rule.path.bytes, reason: "its bookmark is not known to this launch")
        }
        guard let area = try StagingArea.open(state: broker.state, app: app, grant: resolved.grant, create: true) else {
            throw StagingError.nothingStaged(app: app.rawValue)
        }
        let host = try resolved.rule.descriptor.reopenedFolder()
        let clone = try area.prepare(host: host, as: StagedGrant(app: app, grant: resolved.grant, name: resolved.name, path: resolved.rule.path, bookmark: bookmark))
        let rule = PathRule(grant: resolved.name, path: resolved.rule.path, descriptor: resolved.rule.descriptor, access: .readWrite, stagedIn: clone)
        var staged = ResolvedGrant(name: resolved.name, rule: rule, variable: resolved.variable, grant: resolved.grant)
        staged.bookmark = bookmark
        staged.staging = area
        return staged
    }
}
