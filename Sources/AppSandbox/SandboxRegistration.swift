@preconcurrency import Glibc
import Grants
import Sandbox
import SystemPackage

/// A launcher's record of its running sandbox (`RunningSandboxes`, runtime
/// state), kept while the sandbox holds grants so that `grants revoke` can
/// name it: written once before the command starts, changed only as live
/// grants come and go (or when a best-effort launch fell back to another
/// view than planned), removed when the sandbox has ended. Nothing is
/// written for a sandbox that holds no grant. Owned by `RunningSandbox`.
final class SandboxRegistration: @unchecked Sendable {
    private let records: () throws(GrantError) -> RunningSandboxes
    private var folder: RunningSandboxes?
    private var record: SandboxRecord?
    private let app: AppID
    private var view: FileSystemView
    private let command: [[UInt8]]
    private var grants: [SandboxRecord.Held] = []
    /// False on a read-only runtime folder: nothing is recorded.
    private var recordable = true
    /// Room for the next rewrite should the disk be full (see `RecordSpare`).
    private var spare: RecordSpare?
    /// Why the launcher is ending the sandbox, once it is.
    private var endingWhy: SandboxRecord.Ending?
    private var keepAtEnd = false

    init(records: @escaping () throws(GrantError) -> RunningSandboxes, app: AppID, view: FileSystemView, command: [[UInt8]]) {
        self.records = records
        self.app = app
        self.view = view
        self.command = command
    }

    /// The grants held now, as recorded.
    var held: [SandboxRecord.Held] { grants }

    /// Records the grants given at launch (once, with what a revocation will
    /// do to each), then reads the ledger again through `broker`: a grant
    /// revoked before the record existed (which `revoke` could not have
    /// seen) fails the launch instead of running unnoticed.
    func begin(_ launched: [SandboxRecord.Held], broker: GrantBroker) throws(GrantError) {
        guard !launched.isEmpty else { return }
        grants += launched
        do {
            try write()
        } catch .stateDirectory(_, let errno) where errno == .permissionDenied || errno == .readOnlyFileSystem {
            // A runtime folder the user made read-only: nothing is recorded,
            // and `revoke` cannot name this sandbox (it says so of none).
            recordable = false
        }
        let live = try broker.liveness(of: launched.map(\.grant))
        if let revoked = launched.first(where: { live[$0.grant] != true }) {
            end()
            throw .revokedDuringLaunch(grant: revoked.grant, path: Printable.path(bytes: revoked.path.bytes))
        }
    }

    /// What the launch turned out to be, when it differs from the plan (a
    /// best-effort launch in the host view: nothing there can be taken away).
    func settle(view actual: FileSystemView, takenAway: Set<GrantID>) throws(GrantError) {
        let kinds = grants.map { held in
            SandboxRecord.Held(grant: held.grant, path: held.path, origin: held.origin,
                               revocation: takenAway.contains(held.grant) ? .takenAway : .keptUntilEnd)
        }
        guard actual != view || kinds != grants else { return }
        view = actual
        grants = kinds
        if !grants.isEmpty { try write() }
    }

    /// A grant attached while the sandbox runs.
    func attached(_ grant: GrantID, path: FilePath) throws(GrantError) {
        guard !grants.contains(where: { $0.grant == grant }) else { return }
        grants.append(SandboxRecord.Held(grant: grant, path: path, origin: .attached, revocation: .takenAway))
        try write()
    }

    /// A grant detached: the sandbox no longer reaches it.
    func detached(_ grant: GrantID) throws(GrantError) {
        let before = grants.count
        grants.removeAll { $0.grant == grant && $0.revocation == .takenAway }
        guard grants.count != before else { return }
        if grants.isEmpty { end() } else { try write() }
    }

    /// The launcher ends the sandbox because a revoked folder could not be
    /// taken away: the record says why, and stays after the launcher exits
    /// for `grants revoke` to read (it removes it). Best effort: the disk
    /// may be full (the spare is used), and the sandbox ends either way.
    /// Said once: what follows the first failure fails for the ending.
    func ending(_ why: SandboxRecord.Ending) {
        // The first reason is the one: a later try fails for the ending itself (the keeper is gone).
        guard record != nil, endingWhy == nil else { return }
        endingWhy = why
        do { try write() } catch { return }
        keepAtEnd = true
    }

    /// The sandbox ended: its record goes (unless it says why it ended).
    func end() {
        if let record, !keepAtEnd { folder?.remove(record.launcher) }
        record = nil
    }

    deinit { end() }

    private func write() throws(GrantError) {
        guard recordable else { return }
        if folder == nil { folder = try records() }
        let launcher: ProcessIdentity
        if let record {
            launcher = record.launcher
        } else {
            do { launcher = try ProcessIdentity.current() } catch { throw .stateDirectory(step: "reading this launcher's start time (/proc/self/stat)", errno: error) }
        }
        var next = SandboxRecord(launcher: launcher, app: app.rawValue, view: view, grants: grants, command: command)
        next.ending = endingWhy
        try folder!.write(next, spare: &spare)
        record = next
        // Made (again) after a write that found room: the first is made
        // before the command starts, when it cannot have filled the disk.
        if spare == nil { spare = folder!.makeSpare() }
    }
}
