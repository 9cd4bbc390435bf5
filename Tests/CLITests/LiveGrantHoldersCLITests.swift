import Foundation
import Testing

/// `grants revoke` and the running sandboxes that hold what it revokes:
/// the launcher's record in the state folder, what revoke says of each
/// view, `--end-holders`, and the records a crash or an attacker could
/// leave (stale, a reused pid, malformed, another user's).
@Suite(.serialized) struct LiveGrantHoldersCLITests {
    let home = CLI.Home()
    /// Runtime state in the state folder (written once, never synced).
    var running: String { home.path + "/state/sandboxed-run/running" }
    static let app = "com.example.holder"
    static let canBecomeNobody = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")
    static let nobody = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

    /// A folder granted to `app`, its bookmark at `name`.bookmark.
    @discardableResult
    func grant(_ name: String, app: String = Self.app, as user: uid_t? = nil) throws -> String {
        let folder = home.path + "/" + name
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let result = try cli(["pick", "--app", app, "--select", folder, "-o", home.path + "/\(name).bookmark"], as: user)
        #expect(result.status == 0, "\(result)")
        return folder
    }

    func cli(_ arguments: [String], as user: uid_t? = nil) throws -> CLI.Result {
        guard user != nil else { return try CLI.run(arguments, home: home) }
        return try CLI.program(Self.nobody[0], Array(Self.nobody.dropFirst()) + [CLI.binary] + arguments, environment: home.environment)
    }

    /// A sandbox holding `grants` (names given to `grant`), started and running.
    func start(grants: [String], app: String = Self.app, view: String = "host", extra: [String] = [], as user: uid_t? = nil) throws -> Process {
        let process = Process()
        let arguments = ["run", "--app", app, "--view", view] + grants.flatMap { ["--grant", "\($0.uppercased())=\(home.path)/\($0).bookmark"] }
            + ["--", "/bin/sh", "-c", "echo started; exec /bin/sleep 600"] + extra
        if user != nil {
            process.executableURL = URL(fileURLWithPath: Self.nobody[0])
            process.arguments = Array(Self.nobody.dropFirst()) + [CLI.binary] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: CLI.binary)
            process.arguments = arguments
        }
        process.environment = home.environment
        process.currentDirectoryURL = URL(fileURLWithPath: home.path)
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let line = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
        #expect(line == "started\n", "the sandbox did not start: \(line)")
        return process
    }

    func records() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: running)) ?? []).sorted()
    }

    func stop(_ process: Process) {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    /// Waits at most `seconds` for `process` to end (a test never hangs on a sandbox nothing ended).
    @discardableResult
    func waitForEnd(_ process: Process, within seconds: Double = 20) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        guard !process.isRunning else { Issue.record("pid \(process.processIdentifier) did not end"); return false }
        process.waitUntilExit()
        return true
    }

    func alive(_ pid: pid_t) -> Bool {
        guard kill(pid, 0) == 0 else { return false }
        return (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8))?.contains(") Z ") != true
    }

    // MARK: Host view

    @Test func aHostViewSandboxHoldingARevokedFolderIsNamedAndKeepsRunning() throws {
        let folder = try grant("notes")
        let sandbox = try start(grants: ["notes"])
        defer { stop(sandbox) }
        #expect(records().count == 1, "the launcher recorded its sandbox")
        let revoked = try cli(["grants", "revoke", "--folder", folder])
        #expect(revoked.status == 3, "\(revoked)")
        #expect(revoked.stdout.hasPrefix("revoked 1 grant\nstill held by 1 running sandbox"), "\(revoked)")
        #expect(revoked.stdout.contains("access continues until the sandbox ends"), "\(revoked)")
        #expect(revoked.stdout.contains("pid \(sandbox.processIdentifier)  \(Self.app)  host view"), "\(revoked)")
        #expect(revoked.stdout.contains("      \(folder)  (grant "), "\(revoked)")
        #expect(revoked.stdout.contains("command: /bin/sh -c 'echo started; exec /bin/sleep 600'"), "\(revoked)")
        #expect(revoked.stdout.contains("nothing was ended"), "without a terminal, nothing is asked and nothing ended")
        #expect(sandbox.isRunning)
        let holders = try cli(["grants", "holders"])
        #expect(holders.status == 0 && holders.stdout.contains("pid \(sandbox.processIdentifier)  \(Self.app)  host view"), "\(holders)")
    }

    @Test func theRecordGoesWhenTheSandboxEnds() throws {
        try grant("notes")
        let sandbox = try start(grants: ["notes"])
        #expect(records().count == 1)
        kill(sandbox.processIdentifier, SIGTERM)
        guard waitForEnd(sandbox) else { return }
        #expect(records().isEmpty, "\(records())")
        // A sandbox without grants writes nothing.
        let plain = try CLI.run(["run", "--app", Self.app, "--view", "host", "--", "/bin/sh", "-c", "ls '\(running)' 2>&1 | wc -l"], home: home)
        #expect(plain.status == 0 && records().isEmpty, "\(plain)")
    }

    @Test func endHoldersEndsTheHolderAndOnlyIt() throws {
        let notes = try grant("notes")
        try grant("photos")
        try grant("other", app: "com.example.other")
        let holder = try start(grants: ["notes"])
        let bystander = try start(grants: ["photos"])
        let otherApp = try start(grants: ["other"], app: "com.example.other")
        defer { [holder, bystander, otherApp].forEach(stop) }
        let ended = try cli(["grants", "revoke", "--folder", notes, "--end-holders"])
        #expect(ended.status == 0, "\(ended)")
        #expect(ended.stdout.contains("ended pid \(holder.processIdentifier) (\(Self.app))"), "\(ended)")
        guard waitForEnd(holder) else { return }
        #expect(holder.terminationStatus == 128 + SIGTERM, "the launcher forwarded SIGTERM and exited with the command")
        #expect(bystander.isRunning && otherApp.isRunning, "only the holder of the revoked folder was ended")
        #expect(!ended.stdout.contains("pid \(bystander.processIdentifier)") && !ended.stdout.contains("pid \(otherApp.processIdentifier)"))
        #expect(records().count == 2, "\(records())")
    }

    @Test func aHolderThatIgnoresSIGTERMIsKilledAfterTheGracePeriod() throws {
        let notes = try grant("notes")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CLI.binary)
        // The command ignores SIGTERM; so does its launcher only in the sense that it forwards it.
        process.arguments = ["run", "--app", Self.app, "--view", "host", "--grant", "NOTES=\(home.path)/notes.bookmark", "--",
                             "/bin/sh", "-c", "trap '' TERM; echo started; while :; do sleep 1; done"]
        process.environment = home.environment
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { stop(process) }
        #expect(String(decoding: out.fileHandleForReading.availableData, as: UTF8.self) == "started\n")
        let ended = try cli(["grants", "revoke", "--folder", notes, "--end-holders"])
        #expect(ended.status == 0, "\(ended)")
        #expect(ended.stdout.contains("killed pid \(process.processIdentifier)"), "\(ended)")
        guard waitForEnd(process) else { return }
        #expect(records().isEmpty, "the killed launcher's record was removed by revoke: \(records())")
    }

    /// On a terminal revoke asks; only y (or yes) ends anything.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script"), "needs script(1) for a terminal"))
    func onATerminalRevokeAsksAndEndsOnlyOnYes() throws {
        let notes = try grant("notes")
        let sandbox = try start(grants: ["notes"])
        defer { stop(sandbox) }
        func onTerminal(answer: String) throws -> CLI.Result {
            // script(1) gives the command a pty, fed from its stdin.
            try CLI.program("/bin/sh", ["-c", "printf '\(answer)\\n' | exec /usr/bin/script -qec \"'\(CLI.binary)' grants revoke --folder '\(notes)'\" /dev/null"],
                            environment: home.environment)
        }
        for answer in ["", "n", "yess"] {
            let declined = try onTerminal(answer: answer)
            #expect(declined.stdout.contains("End this sandbox now (SIGTERM, then SIGKILL after 5 s)? [y/N]"), "\(declined)")
            #expect(declined.stdout.contains("nothing was ended") && sandbox.isRunning, "\(answer): \(declined)")
        }
        let accepted = try onTerminal(answer: "y")
        #expect(accepted.stdout.contains("ended pid \(sandbox.processIdentifier)"), "\(accepted)")
        guard waitForEnd(sandbox) else { return }
    }

    @Test(.enabled(if: canBecomeNobody, "needs root (to become uid 65534) and setpriv"))
    func anUnprivilegedHolderIsNamedAndEnded() throws {
        #expect(try CLI.program("/bin/chown", ["-R", "65534:65534", home.path]).status == 0)
        let notes = try grant("notes", as: 65534)
        let sandbox = try start(grants: ["notes"], as: 65534)
        defer { stop(sandbox) }
        let named = try cli(["grants", "revoke", "--folder", notes, "--keep-holders"], as: 65534)
        #expect(named.status == 3 && named.stdout.contains("pid \(sandbox.processIdentifier)  \(Self.app)  host view"), "\(named)")
        let ended = try cli(["grants", "revoke", "--folder", notes, "--end-holders"], as: 65534)
        #expect(ended.status == 0 && ended.stdout.contains("ended pid \(sandbox.processIdentifier)"), "\(ended)")
        guard waitForEnd(sandbox) else { return }
        // Root's state is another: it knows nothing of uid 65534's sandboxes.
        #expect(records().isEmpty)
    }

    // MARK: Private view

    @Test(.enabled(if: getuid() == 0, "the private view with live grants: run as root here (LiveGrantsCLITests covers uid 65534)"))
    func aPrivateViewLiveGrantIsSaidToBeCut() throws {
        let folder = home.path + "/picked"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let picker = home.path + "/picker"
        _ = FileManager.default.createFile(atPath: picker, contents: Data("#!/bin/sh\necho '\(folder)'\n".utf8), attributes: [.posixPermissions: 0o755])
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CLI.binary)
        process.arguments = ["run", "--app", Self.app, "--picker", picker, "--", "/bin/sh", "-c",
                             "p=$(\"$SANDBOXED_RUN\" open-panel) || exit 9; echo started; while ls \"$p\" >/dev/null 2>&1; do sleep 0.05; done; echo cut; exec sleep 600"]
        process.environment = home.environment
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { stop(process) }
        #expect(String(decoding: out.fileHandleForReading.availableData, as: UTF8.self) == "started\n")
        let holders = try cli(["grants", "holders"])
        #expect(holders.stdout.contains("private view") && holders.stdout.contains("\(folder)  (grant ") && holders.stdout.contains("attached while running; revoking it takes it away)"), "\(holders)")
        let revoked = try cli(["grants", "revoke", "--folder", folder])
        #expect(revoked.status == 0, "\(revoked)")
        #expect(revoked.stdout.contains("cut in 1 running sandbox (private view)"), "\(revoked)")
        #expect(revoked.stdout.contains("pid \(process.processIdentifier)  \(Self.app)  private view"), "\(revoked)")
        #expect(!revoked.stdout.contains("still held"), "\(revoked)")
        #expect(String(decoding: out.fileHandleForReading.availableData, as: UTF8.self) == "cut\n")
        #expect(process.isRunning, "a cut sandbox is not ended")
        #expect(records().count == 0, "its record went with its last grant: \(records())")
    }

    /// The line `holders` or `revoke` printed for `folder`.
    func line(of folder: String, in output: String) -> String? {
        output.split(separator: "\n").map(String.init).first { $0.hasPrefix("      \(folder)  (grant ") }
    }

    /// Each grant says how it came and what revoking it does, the two
    /// apart: given at launch and kept (host view: a Landlock rule; private
    /// view: inside another grant, sharing its mount), given at launch and
    /// taken away (private view: a mount of its own), attached while running
    /// (taken away). `revoke` says the same of what it cut.
    @Test(.enabled(if: getuid() == 0, "the private view with live grants: run as root here (LiveGrantsCLITests covers uid 65534)"))
    func eachGrantSaysHowItCameAndWhatRevokingItDoes() throws {
        let kept = try grant("kept")
        let own = try grant("own")
        let inner = try grant("own/inner")
        let picked = home.path + "/picked"
        try FileManager.default.createDirectory(atPath: picked, withIntermediateDirectories: true)
        let picker = home.path + "/picker"
        _ = FileManager.default.createFile(atPath: picker, contents: Data("#!/bin/sh\necho '\(picked)'\n".utf8), attributes: [.posixPermissions: 0o755])
        let host = try start(grants: ["kept"])
        defer { stop(host) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CLI.binary)
        process.arguments = ["run", "--app", Self.app, "--view", "private", "--picker", picker, "--grant", "OWN=\(home.path)/own.bookmark",
                             "--grant", "INNER=\(home.path)/own/inner.bookmark", "--",
                             "/bin/sh", "-c", "p=$(\"$SANDBOXED_RUN\" open-panel) || exit 9; echo started; "
                                + "while ls \"$OWN\" >/dev/null 2>&1; do sleep 0.05; done; echo cut; exec sleep 600"]
        process.environment = home.environment
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { stop(process) }
        #expect(String(decoding: out.fileHandleForReading.availableData, as: UTF8.self) == "started\n")

        let holders = try cli(["grants", "holders"])
        #expect(holders.status == 0, "\(holders)")
        #expect(line(of: kept, in: holders.stdout)?.hasSuffix(", given at launch; revoking it leaves it reachable until the sandbox ends)") == true, "\(holders)")
        #expect(line(of: own, in: holders.stdout)?.hasSuffix(", given at launch; revoking it takes it away)") == true, "\(holders)")
        #expect(line(of: inner, in: holders.stdout)?.hasSuffix(", given at launch; revoking it leaves it reachable until the sandbox ends)") == true, "\(holders)")
        #expect(line(of: picked, in: holders.stdout)?.hasSuffix(", attached while running; revoking it takes it away)") == true, "\(holders)")

        let revoked = try cli(["grants", "revoke", "--folder", own])
        #expect(revoked.status == 0, "\(revoked)")
        #expect(revoked.stdout.contains("cut in 1 running sandbox (private view)"), "\(revoked)")
        #expect(line(of: own, in: revoked.stdout)?.hasSuffix(", given at launch; revoking it takes it away)") == true, "\(revoked)")
        #expect(!revoked.stdout.contains("still held") && !revoked.stdout.contains("attached while running"), "\(revoked)")
        #expect(String(decoding: out.fileHandleForReading.availableData, as: UTF8.self) == "cut\n", "the command lost it, as said")
    }

    // MARK: Stale records

    @Test func aLauncherKilledBySIGKILLLeavesARecordThatIsNeverNamed() throws {
        let folder = try grant("notes")
        let sandbox = try start(grants: ["notes"])
        kill(sandbox.processIdentifier, SIGKILL)
        guard waitForEnd(sandbox) else { return }
        #expect(records().count == 1, "SIGKILL left the record")
        let revoked = try cli(["grants", "revoke", "--folder", folder, "--end-holders"])
        #expect(revoked.status == 0 && revoked.stdout == "revoked 1 grant\n", "\(revoked)")
        #expect(records().isEmpty, "the stale record was removed")
    }

    /// The identity of a process as a record states it: boot, pid namespace, pid, start time.
    func identity(of pid: pid_t) throws -> (boot: String, pidns: UInt64, start: UInt64) {
        let boot = try String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        var namespace = stat()
        #expect(stat("/proc/self/ns/pid", &namespace) == 0)
        let pidns = UInt64(namespace.st_ino)
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        let fields = stat[stat.range(of: ")", options: .backwards)!.upperBound...].split(separator: " ")
        return (boot, pidns, UInt64(fields[19])!)
    }

    /// Writes a record naming `pid` with `start`, holding grant `id`; in
    /// format 1 (an earlier sandboxed-run's) when `grants` gives its grant lines.
    @discardableResult
    func plantRecord(pid: pid_t, start: UInt64, grant id: String, mode: Int = 0o600, format1 grants: [String]? = nil) throws -> String {
        let (boot, pidns, _) = try identity(of: getpid())
        let hex = { (text: String) in text.utf8.map { String(format: "%02x", $0) }.joined() }
        let lines = grants.map { $0.map { "grant \($0)\n" }.joined() } ?? "grant \(id) launch kept-until-end \(hex("/planted"))\n"
        let text = "sandboxed-run-running \(grants == nil ? 2 : 1)\nboot \(boot)\npidns \(pidns)\npid \(pid)\nstart \(start)\napp \(hex(Self.app))\nview host\n"
            + lines + "arg \(hex("/bin/sleep"))\nend\n"
        try FileManager.default.createDirectory(atPath: running, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let path = running + "/\(pidns)-\(pid)-\(start)"
        _ = FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: mode])
        return path
    }

    func grantID(_ folder: String) throws -> String {
        let list = try cli(["grants", "list", "--json"])
        let grants = try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as! [[String: Any]]
        return try #require(grants.first { $0["path"] as? String == folder }?["id"] as? String)
    }

    /// A record whose launcher died and whose pid another process took: the
    /// pid is alive, the start time is not its. It must not be named, and the
    /// process must not be signalled. The same record with the process's own
    /// start time is named and ended: only the identity tells them apart.
    @Test func aRecordWhosePidWasReusedIsNeverNamedNorSignalled() throws {
        let folder = try grant("notes")
        let id = try grantID(folder)
        let other = Process()
        // SIGTERM as it would be in a sandbox's launcher (the test runner's children may inherit it ignored).
        other.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        other.arguments = ["--default-signal=TERM", "/bin/sleep", "600"]
        try other.run()
        defer { stop(other) }
        let start = try identity(of: other.processIdentifier).start
        let planted = try plantRecord(pid: other.processIdentifier, start: start - 1, grant: id)
        let revoked = try cli(["grants", "revoke", "--folder", folder, "--end-holders"])
        #expect(revoked.status == 0 && revoked.stdout == "revoked 1 grant\n", "\(revoked)")
        #expect(alive(other.processIdentifier), "a process that reused a recorded pid was signalled")
        #expect(!FileManager.default.fileExists(atPath: planted), "the stale record was removed")

        // The control: the same record, with the right start time, is believed.
        _ = try plantRecord(pid: other.processIdentifier, start: start, grant: id)
        let believed = try cli(["grants", "revoke", "--folder", folder, "--end-holders"])
        #expect(believed.stdout.contains("pid \(other.processIdentifier)  \(Self.app)  host view"), "\(believed)")
        #expect(believed.stdout.contains("ended pid \(other.processIdentifier) (\(Self.app))"), "\(believed)")
        guard waitForEnd(other) else { return }
        #expect(other.terminationReason == .uncaughtSignal && other.terminationStatus == SIGTERM)
    }

    /// A record an earlier sandboxed-run wrote (format 1) names its sandbox
    /// as far as it can: its "detachable" grant may have been attached or
    /// given at launch, and is shown as either. One whose launcher is gone
    /// is pruned as any other, not an error that stops `holders`.
    @Test func aRecordOfAnEarlierSandboxedRunIsReadAsFarAsItSays() throws {
        let folder = try grant("notes")
        let id = try grantID(folder)
        let other = Process()
        other.executableURL = URL(fileURLWithPath: "/bin/sleep")
        other.arguments = ["600"]
        try other.run()
        defer { stop(other) }
        let start = try identity(of: other.processIdentifier).start
        let hex = { (text: String) in text.utf8.map { String(format: "%02x", $0) }.joined() }
        let stale = try plantRecord(pid: other.processIdentifier, start: start - 1, grant: id, format1: ["\(id) fixed \(hex("/gone"))"])
        try plantRecord(pid: other.processIdentifier, start: start, grant: id,
                        format1: ["\(id) fixed \(hex("/old/fixed"))", "\(id) detachable \(hex("/old/detachable"))"])
        let holders = try cli(["grants", "holders"])
        #expect(holders.status == 0, "\(holders)")
        #expect(line(of: "/old/fixed", in: holders.stdout)?.hasSuffix(", given at launch; revoking it leaves it reachable until the sandbox ends)") == true, "\(holders)")
        #expect(line(of: "/old/detachable", in: holders.stdout)?.hasSuffix(
            ", given at launch or attached while running (an earlier sandboxed-run did not record which); revoking it takes it away)") == true, "\(holders)")
        #expect(!FileManager.default.fileExists(atPath: stale), "the stale record was pruned")
    }

    // MARK: Hostile names

    @Test func hostileNamesArePrintedEscaped() throws {
        // A folder named with an escape sequence and a byte that is not UTF-8, and a command line with one.
        let name = "v\u{1b}]0;owned\u{7}"
        let made = try CLI.program("/bin/sh", ["-c", "mkdir \"$1/$2$(printf '\\377')\" && exec \"$0\" pick --app \(Self.app) --select \"$1/$2$(printf '\\377')\" -o \"$1/notes.bookmark\"",
                                               CLI.binary, home.path, name], environment: home.environment)
        #expect(made.status == 0, "\(made)")
        let sandbox = try start(grants: ["notes"], extra: ["\u{1b}[2J\u{1b}[Hall clear", "\u{202e}txt.exe"])
        defer { stop(sandbox) }
        for arguments in [["grants", "revoke", "--app", Self.app, "--keep-holders"], ["grants", "holders"]] {
            let result = try cli(arguments)
            #expect(!result.stdout.utf8.contains(0x1b) && !result.stdout.utf8.contains(0x07), "\(arguments): a raw control byte was printed")
            #expect(!result.stdout.contains("\u{fffd}") && !result.stdout.contains("\u{202e}"), "\(arguments): \(result.stdout)")
            #expect(result.stdout.contains("/v\\x1b]0;owned\\x07\\xff  (grant "), "\(result)")
            #expect(result.stdout.contains("'\\x1b[2J\\x1b[Hall clear' \\u{202e}txt.exe"), "\(result)")
        }
    }

    // MARK: Records read with distrust

    func refused(_ expected: String, as user: uid_t? = nil, folder: String) throws {
        let revoked = try cli(["grants", "revoke", "--folder", folder], as: user)
        #expect(revoked.status == 125, "\(revoked)")
        #expect(revoked.stdout.hasPrefix("revoked "), "the ledger changed before the records were read: \(revoked)")
        #expect(revoked.stderr.contains(running) && revoked.stderr.contains(expected), "\(revoked.stderr)")
        let holders = try cli(["grants", "holders"], as: user)
        #expect(holders.status == 125 && holders.stderr.contains(expected), "\(holders)")
    }

    @Test func malformedRecordsAreRefusedNamingTheFile() throws {
        let cases: [(String, [UInt8], String)] = [
            ("garbage", Array("hello\n".utf8), "is not a well-formed record of a running sandbox: does not start with"),
            ("cut short", Array("sandboxed-run-running 2\nboot x\n".utf8), "does not end with an \"end\" line"),
            ("unknown field", Array("sandboxed-run-running 2\nevil 1\nend\n".utf8), "line 2: unknown"),
            ("not a number", Array("sandboxed-run-running 2\nboot 8f4dfa16-fac2-4225-a386-2f91452cd6f5\npidns 1\npid -1\nstart 2\napp 61\nview host\nend\n".utf8), "not a number"),
            ("huge", [UInt8](repeating: 0x41, count: 10 << 20), "is larger than"),
        ]
        for (label, bytes, expected) in cases {
            let folder = try grant("f-\(label.replacingOccurrences(of: " ", with: "-"))")
            try FileManager.default.createDirectory(atPath: running, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let path = running + "/1-2-3"
            _ = FileManager.default.createFile(atPath: path, contents: Data(bytes), attributes: [.posixPermissions: 0o600])
            try refused(expected, folder: folder)
            try FileManager.default.removeItem(atPath: path)
        }
    }

    @Test func recordsThatAreNotPrivateRegularFilesOfTheUserAreRefused() throws {
        let folder = try grant("notes")
        let id = try grantID(folder)
        // World-readable.
        var path = try plantRecord(pid: 1, start: 1, grant: id, mode: 0o644)
        try refused("is accessible to group or others", folder: folder)
        try FileManager.default.removeItem(atPath: path)
        // A FIFO: refused, never waited on.
        path = running + "/1-2-3"
        #expect(mkfifo(path, 0o600) == 0)
        try refused("is a FIFO", folder: folder)
        try FileManager.default.removeItem(atPath: path)
        // A link.
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "/etc/passwd")
        try refused("is a symbolic link", folder: folder)
        try FileManager.default.removeItem(atPath: path)
        // A name that is not a record's.
        _ = FileManager.default.createFile(atPath: running + "/notes.txt", contents: Data(), attributes: [.posixPermissions: 0o600])
        try refused("its name is not PIDNS-PID-START", folder: folder)
        try FileManager.default.removeItem(atPath: running + "/notes.txt")
        // The folder itself, open to others.
        #expect(chmod(running, 0o755) == 0)
        try refused("is accessible to group or others", folder: folder)
    }

    @Test(.enabled(if: getuid() == 0, "needs root to make a file another user owns"))
    func aRecordOwnedByAnotherUserIsRefused() throws {
        let folder = try grant("notes")
        let path = try plantRecord(pid: 1, start: 1, grant: try grantID(folder))
        #expect(chown(path, 65534, 65534) == 0)
        try refused("is owned by uid 65534, not by you (uid 0)", folder: folder)
    }

    @Test(.enabled(if: canBecomeNobody, "needs root (to become uid 65534) and setpriv"))
    func anUnprivilegedUserRefusesARecordRootPlanted() throws {
        #expect(try CLI.program("/bin/chown", ["-R", "65534:65534", home.path]).status == 0)
        let folder = try grant("notes", as: 65534)
        let id = try cli(["grants", "list", "--json"], as: 65534).stdout
        let grants = try JSONSerialization.jsonObject(with: Data(id.utf8)) as! [[String: Any]]
        let path = try plantRecord(pid: 1, start: 1, grant: try #require(grants.first?["id"] as? String))
        // The runtime folder is the user's own (root made it, planting).
        #expect(chown(running, 65534, 65534) == 0)
        #expect(chown(path, 0, 0) == 0)
        try refused("is owned by uid 0, not by you (uid 65534)", as: 65534, folder: folder)
    }
}
