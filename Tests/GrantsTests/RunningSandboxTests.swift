import Foundation
import Testing
import SystemPackage
@testable import AppSandbox
@testable import Grants
@testable import Sandbox

/// The launcher's record of its running sandbox, as a library caller meets it.
@Suite struct RunningSandboxTests {
    /// A grant revoked after the launcher resolved it but before its record
    /// existed: `revoke` could not have named the sandbox, so the launch
    /// must not go on. Without the second look at the ledger it would run
    /// unseen with the revoked folder.
    @Test func aGrantRevokedBeforeTheRecordExistedFailsTheLaunch() throws {
        let home = Home()
        let session = try SessionTests.session(home)
        let issued = try session.broker().grant(app: memo, folder: try home.folder("Vault"), access: .readWrite)
        let held = SandboxRecord.Held(grant: issued.id, path: issued.path, origin: .launch, revocation: .keptUntilEnd)
        // Resolved, then revoked by another process before the record is written.
        #expect(try session.broker().revoke(grant: issued.id.hex) == 1)
        let registration = SandboxRegistration(records: { () throws(GrantError) in try session.runningSandboxes() }, app: memo, view: .host, command: [Array("/bin/true".utf8)])
        #expect(throws: GrantError.self) { try registration.begin([held], broker: session.broker()) }
        #expect(try session.runningSandboxes().survey().running.isEmpty, "the record went with the refused launch")

        // A live grant: recorded, seen as this process's, removed at the end.
        let live = try session.broker().grant(app: memo, folder: try home.folder("Notes"), access: .readOnly)
        let kept = SandboxRegistration(records: { () throws(GrantError) in try session.runningSandboxes() }, app: memo, view: .private, command: [Array("/bin/true".utf8), [0xff, 0x1b]])
        try kept.begin([SandboxRecord.Held(grant: live.id, path: live.path, origin: .launch, revocation: .keptUntilEnd)], broker: session.broker())
        let survey = try session.runningSandboxes().survey()
        let record = try #require(survey.running.first)
        #expect(survey.running.count == 1 && record.launcher.pid == getpid() && record.view == .private)
        #expect(record.command == [Array("/bin/true".utf8), [0xff, 0x1b]] && record.grants.map(\.grant) == [live.id])
        kept.end()
        #expect(try session.runningSandboxes().survey().running.isEmpty)
    }

    /// The command name in /proc/PID/stat is whatever the process chose:
    /// parentheses and spaces in it must not shift the fields.
    @Test func theStartTimeIsReadPastAHostileCommandName() {
        let fields = (3...22).map { String($0) }.joined(separator: " ")
        let line = Array("42 (a) 1 2 3 ) x (y) \(fields) 23 24\n".utf8)
        #expect(ProcessIdentity.parseStartTime(line) == 22)
        #expect(ProcessIdentity.parseStartTime(Array("42 (short) 1 2\n".utf8)) == nil)
        #expect(ProcessIdentity.parseStartTime(Array("no parenthesis".utf8)) == nil)
        let me = try? ProcessIdentity.current()
        #expect(me?.pid == getpid() && (try? me?.state()) == .running)
    }

    @Test func aRecordIsReadBackExactlyAndOneCutShortIsRefused() throws {
        let me = try ProcessIdentity.current()
        let id = GrantID(digest: [UInt8](repeating: 7, count: 32))
        let long = [UInt8](repeating: 0x41, count: 3000)
        let record = SandboxRecord(
            launcher: me, app: "com.example.memo", view: .host,
            grants: [.init(grant: id, path: FilePath(bytes: [0x2f, 0xff, 0x0a, 0x1b]), origin: .attached, revocation: .takenAway),
                     .init(grant: id, path: FilePath("/launch/own-mount"), origin: .launch, revocation: .takenAway),
                     .init(grant: id, path: FilePath("/launch/rule"), origin: .launch, revocation: .keptUntilEnd)],
            command: [long, [0x0a], long, long])
        #expect(record.command.count == 2 && record.omittedArguments == 2, "the command line is capped at \(SandboxRecord.commandLimit) bytes")
        let bytes = record.encoded()
        guard case .success(let decoded) = SandboxRecord.decode(bytes) else { Issue.record("not read back"); return }
        #expect(decoded == record)
        for cut in [bytes.count - 1, bytes.count - 5, bytes.count / 2, 10, 0] {
            guard case .failure = SandboxRecord.decode(Array(bytes.prefix(cut))) else { Issue.record("a record cut at \(cut) was read"); continue }
        }
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(text.hasPrefix("sandboxed-run-running 3\n"), "\(text)")
        #expect(text.contains("grant \(id.hex) launch taken-away "), "\(text)")
        // Nothing a launcher writes: an attached grant is always taken away.
        let impossible = text.replacingOccurrences(of: "attached taken-away", with: "attached kept-until-end")
        guard case .failure(let refused) = SandboxRecord.decode(Array(impossible.utf8)) else { Issue.record("an attached grant kept until the end was read"); return }
        #expect(refused.problem.contains("not a grant"), "\(refused.problem)")
        // Format 2's words in a format 1 record, and the reverse: refused.
        let mixed = text.replacingOccurrences(of: "sandboxed-run-running 3", with: "sandboxed-run-running 1")
        guard case .failure = SandboxRecord.decode(Array(mixed.utf8)) else { Issue.record("format 2 grants read as format 1"); return }
        let unrecorded = text.replacingOccurrences(of: "attached taken-away", with: "unrecorded taken-away")
        guard case .failure = SandboxRecord.decode(Array(unrecorded.utf8)) else { Issue.record("\"unrecorded\" read in format 2"); return }
    }

    /// Why a launcher ended its sandbox is read back exactly (a reason is
    /// the launcher's words, with paths whose bytes the app chose), only in
    /// format 3, once, and only as "held" or "failed" with a reason.
    @Test func whyASandboxEndedIsReadBackExactly() throws {
        let me = try ProcessIdentity.current()
        var record = SandboxRecord(launcher: me, app: "com.example.memo", view: .private, grants: [], command: [[0x61]])
        for ending in [SandboxRecord.Ending.held, .failed("detaching /vault/\u{1b}[2J\nx: Invalid argument"), nil] {
            record.ending = ending
            guard case .success(let decoded) = SandboxRecord.decode(record.encoded()) else { Issue.record("not read back: \(String(describing: ending))"); continue }
            #expect(decoded == record)
        }
        record.ending = .held
        let text = String(decoding: record.encoded(), as: UTF8.self)
        #expect(text.contains("\nending held\n"), "\(text)")
        for wrong in [text.replacingOccurrences(of: "ending held", with: "ending held\nending held"),
                      text.replacingOccurrences(of: "ending held", with: "ending gone"),
                      text.replacingOccurrences(of: "ending held", with: "ending failed zz"),
                      text.replacingOccurrences(of: "ending held", with: "ending failed " + String(repeating: "41", count: SandboxRecord.endingLimit + 1)),
                      text.replacingOccurrences(of: "sandboxed-run-running 3", with: "sandboxed-run-running 2")] {
            guard case .failure = SandboxRecord.decode(Array(wrong.utf8)) else { Issue.record("read: \(wrong)"); continue }
        }
        // A format 2 record (the version before) is still read.
        record.ending = nil
        let older = String(decoding: record.encoded(), as: UTF8.self).replacingOccurrences(of: "sandboxed-run-running 3", with: "sandboxed-run-running 2")
        guard case .success(let read) = SandboxRecord.decode(Array(older.utf8)) else { Issue.record("format 2 not read"); return }
        #expect(read == record)
    }

    /// A record an earlier sandboxed-run wrote (format 1: "fixed" or
    /// "detachable") is read as far as it says: fixed was a launch-time
    /// grant kept until the end; detachable is taken away, attached or not.
    @Test func aFormat1RecordIsReadAsFarAsItSays() throws {
        let me = try ProcessIdentity.current()
        let id = GrantID(digest: [UInt8](repeating: 9, count: 32))
        let text = "sandboxed-run-running 1\nboot \(me.boot)\npidns \(me.pidNamespace)\npid \(me.pid)\nstart \(me.startTime)\n"
            + "app \(Printable.hex(Array("com.example.memo".utf8)))\nview private\n"
            + "grant \(id.hex) fixed \(Printable.hex(Array("/a".utf8)))\ngrant \(id.hex) detachable \(Printable.hex(Array("/b".utf8)))\nend\n"
        guard case .success(let record) = SandboxRecord.decode(Array(text.utf8)) else { Issue.record("not read"); return }
        #expect(record.grants.map(\.origin) == [.launch, .unrecorded] && record.grants.map(\.revocation) == [.keptUntilEnd, .takenAway])
        for word in ["launch", "attached taken-away"] {
            let wrong = text.replacingOccurrences(of: " fixed ", with: " \(word) ")
            guard case .failure = SandboxRecord.decode(Array(wrong.utf8)) else { Issue.record("\(word) read in format 1"); continue }
        }
    }
}
