@preconcurrency import Glibc
import Grants
import Sandbox
import SystemPackage

/// A launcher's record of its running sandbox in the state folder
/// (`RunningSandboxes`), kept while the sandbox holds grants so that
/// `grants revoke` can name it: written before the command starts, changed
/// as live grants come and go, removed when the sandbox has ended. Nothing
/// is written for a sandbox that holds no grant.
public final class SandboxRegistration: @unchecked Sendable {
    let session: SandboxSession
    private var record: SandboxRecord?
    private let app: AppID
    private var view: FileSystemView
    private let command: [[UInt8]]
    private var grants: [SandboxRecord.Held] = []
    private var records: RunningSandboxes?
    /// False on a read-only state: nothing is recorded.
    private var recordable = true

    init(session: SandboxSession, app: AppID, view: FileSystemView, command: [[UInt8]]) {
        self.session = session
        self.app = app
        self.view = view
        self.command = command
    }

    /// The grants held now, as recorded.
    public var held: [SandboxRecord.Held] { grants }

    /// Records the grants given at launch, then reads the ledger again: a
    /// grant revoked before the record existed (which `revoke` could not
    /// have seen) fails the launch instead of running unnoticed.
    public func holdAtLaunch(_ launched: [SandboxRecord.Held]) throws(GrantError) {
        guard !launched.isEmpty else { return }
        grants += launched
        do {
            try write()
        } catch .stateDirectory(_, let errno) where errno == .permissionDenied || errno == .readOnlyFileSystem {
            // A state the user made read-only: nothing can be revoked there
            // either (revoke writes the ledger), so there is nothing to report.
            recordable = false
        }
        let broker = try session.broker()
        let live = try broker.liveness(of: launched.map(\.grant))
        if let revoked = launched.first(where: { live[$0.grant] != true }) {
            end()
            throw .ledger("grant \(revoked.grant) of \(Printable.path(bytes: revoked.path.bytes)) was revoked while the launch was under way: nothing was started")
        }
    }

    /// The view the sandbox got (a best-effort launch may fall back to the host view).
    public func setView(_ actual: FileSystemView) throws(GrantError) {
        guard actual != view else { return }
        view = actual
        if !grants.isEmpty { try write() }
    }

    /// A grant attached while the sandbox runs.
    public func attached(_ grant: GrantID, path: FilePath) throws(GrantError) {
        guard !grants.contains(where: { $0.grant == grant }) else { return }
        grants.append(SandboxRecord.Held(grant: grant, path: path, kind: .detachable))
        try write()
    }

    /// Grants given at launch that the launcher takes away when they are
    /// revoked (their own mounts in the private view).
    public func detachable(_ ids: [GrantID]) throws(GrantError) {
        var changed = false
        grants = grants.map { held in
            guard held.kind == .fixed, ids.contains(held.grant) else { return held }
            changed = true
            return SandboxRecord.Held(grant: held.grant, path: held.path, kind: .detachable)
        }
        if changed { try write() }
    }

    /// A grant detached: the sandbox no longer reaches it.
    public func detached(_ grant: GrantID) throws(GrantError) {
        let before = grants.count
        grants.removeAll { $0.grant == grant && $0.kind == .detachable }
        guard grants.count != before else { return }
        if grants.isEmpty { end() } else { try write() }
    }

    /// The sandbox ended: its record goes.
    public func end() {
        if let record { records?.remove(record.launcher) }
        record = nil
    }

    private func write() throws(GrantError) {
        guard recordable else { return }
        if records == nil { records = try session.broker().runningSandboxes }
        let launcher: ProcessIdentity
        if let record {
            launcher = record.launcher
        } else {
            do { launcher = try ProcessIdentity.current() } catch { throw .stateDirectory(step: "reading this launcher's start time (/proc/self/stat)", errno: error) }
        }
        let next = SandboxRecord(launcher: launcher, app: app.rawValue, view: view, grants: grants, command: command)
        try records!.write(next)
        record = next
    }
}

extension SandboxSession {
    /// The record of a sandbox of `app` about to be launched in `view`
    /// running `command` (its words as bytes): nothing is written until it holds a grant.
    public func sandboxRegistration(app: AppID, view: FileSystemView, command: [[UInt8]]) -> SandboxRegistration {
        SandboxRegistration(session: self, app: app, view: view, command: command)
    }

    /// The records of running sandboxes in this session's state.
    public func runningSandboxes() throws(GrantError) -> RunningSandboxes {
        try broker().runningSandboxes
    }
}
