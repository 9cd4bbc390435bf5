import Foundation
import SystemPackage
import Testing
@testable import Coordination

/// A scratch folder per test.
final class Scratch {
    let path = NSTemporaryDirectory() + "coordination-tests-" + UUID().uuidString
    init() { try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
    deinit { try? FileManager.default.removeItem(atPath: path) }
    func lines(_ name: String) -> [String] {
        ((try? String(contentsOfFile: path + "/" + name, encoding: .utf8)) ?? "").split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    }
}

/// Programs run as their own processes: the other parties of the protocol.
enum Party {
    static let binary: String = {
        // SANDBOXED_RUN_UNDER_TEST: another build, e.g. scripts/build-release's static one.
        if let other = ProcessInfo.processInfo.environment["SANDBOXED_RUN_UNDER_TEST"] { return other }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
        return URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("sandboxed-run").path
    }()

    /// The package's root, for the files tests read (PROTOCOL.md, Benchmarks/).
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// The first Python block of PROTOCOL.md: the protocol as other languages are told to follow it.
    static let protocolPython: String = {
        let text = (try? String(contentsOfFile: packageRoot + "/Sources/Coordination/PROTOCOL.md", encoding: .utf8)) ?? ""
        guard let start = text.range(of: "```python\n"), let end = text.range(of: "\n```", range: start.upperBound..<text.endIndex) else { return "" }
        return String(text[start.upperBound..<end.lowerBound])
    }()

    /// The protocol in Python, as PROTOCOL.md gives it, with the moves tests need.
    static let python = protocolPython + """

        import sys, time
        def replace(folder, name, transform, hold=0.0, announce=False):
            fd = locked(folder, name, True, create=True)
            if announce: print("held", flush=True)  # the test waits for this line, not for a guessed time
            recover(folder, name, fd)
            old = os.pread(fd, 1 << 24, 0)
            time.sleep(hold)
            temp = stem(name) + b".sr-%016x" % os.getpid()
            t = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=folder)
            os.write(t, transform(old)); os.fsync(t); os.close(t)
            os.rename(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
            sync_folder(folder)
            os.close(fd)
        command, folder_path, name = sys.argv[1], sys.argv[2], os.fsencode(sys.argv[3])
        folder = os.open(folder_path, os.O_RDONLY | os.O_DIRECTORY)
        if command == "remote-edits":      # a sync daemon rewriting the file, coordinated
            end = time.time() + float(sys.argv[4])
            n = 0
            while time.time() < end:
                replace(folder, name, lambda old: old); n += 1
            print(n)
        elif command == "hold":            # hold the write lock, then replace the file
            replace(folder, name, lambda old: old + b"replaced\\n", hold=float(sys.argv[4]), announce=True)
        elif command == "naive-appends":   # seek to the end and write, as the memo writer did
            for i in range(int(sys.argv[4])):
                with open(os.path.join(folder_path, os.fsdecode(name)), "a") as f:
                    time.sleep(0.001); f.write("naive %d\\n" % i)
        elif command == "torn":            # a writer that dies mid-record, holding the lock
            fd = locked(folder, name, True)
            size = os.fstat(fd).st_size
            record = b"x" * 10000 + b"\\n"
            j = os.open(stem(name) + b".sr-journal", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600, dir_fd=folder)
            os.write(j, MAGIC + b"%d %d\\n" % (size, len(record)) + record); os.close(j)
            os.write(fd, record[:5000])
            os.kill(os.getpid(), 9)
        elif command == "evict-held":      # an eviction that holds the note while a writer waits on it
            fd = locked(folder, name, True)
            print("held", flush=True)
            time.sleep(float(sys.argv[4]))
            guard = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=folder)
            fcntl.flock(guard, fcntl.LOCK_EX)
            os.close(os.open(stem(name) + b".icloud", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=folder))
            os.rename(name, stem(name) + b".icloud.data", src_dir_fd=folder, dst_dir_fd=folder)
            os.close(guard)
            os.close(fd)
        elif command == "append":          # PROTOCOL.md's writer
            for line in sys.argv[4:]:
                append(folder, name, os.fsencode(line))
        """

    @discardableResult
    static func run(_ arguments: [String], wait: Bool = true, standardError: Bool = false) throws -> (Process, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: arguments[0])
        process.arguments = Array(arguments.dropFirst())
        let out = Pipe()
        process.standardOutput = out
        process.standardError = standardError ? out : FileHandle.nullDevice
        try process.run()
        if wait { process.waitUntilExit() }
        return (process, out)
    }

    static func append(_ file: String, _ text: String, timeout: String = "30") throws -> Int32 {
        let (process, _) = try run([binary, "append", "--timeout", timeout, file, text])
        return process.terminationStatus
    }

    static func protocolStep(_ arguments: [String], wait: Bool = true) throws -> (Process, Pipe) {
        try run(["/usr/bin/python3", "-c", python] + arguments, wait: wait)
    }

    /// Starts a party that holds `name`'s write lock for `seconds`, then
    /// replaces the file; returns once the lock is held (a loaded machine
    /// can take longer than any fixed sleep to start Python).
    static func holding(_ folder: String, _ name: String, seconds: Double) throws -> Process {
        let (holder, out) = try protocolStep(["hold", folder, name, String(seconds)], wait: false)
        let said = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
        #expect(said.hasPrefix("held"), "the lock holder did not start: \(said)")
        return holder
    }
}

@Suite struct CoordinatedAppendTests {
    @Test func concurrentAppendersAgainstRemoteEditsLoseNothing() throws {
        let scratch = Scratch()
        let file = scratch.path + "/daily.md"
        let (editor, editorOut) = try Party.protocolStep(["remote-edits", scratch.path, "daily.md", "6"], wait: false)
        var writers: [Process] = []
        for writer in 0..<4 {
            let script = "for i in $(seq 1 40); do '\(Party.binary)' append '\(file)' \"w\(writer) $i\" || echo FAILED; done"
            writers.append(try Party.run(["/bin/sh", "-c", script], wait: false).0)
        }
        writers.forEach { $0.waitUntilExit() }
        editor.waitUntilExit()
        let edits = try Int(String(decoding: editorOut.fileHandleForReading.readAll(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        #expect(edits > 10, "the remote edits must really interleave")
        let lines = scratch.lines("daily.md").filter { !$0.isEmpty }
        let expected = Set((0..<4).flatMap { w in (1...40).map { "w\(w) \($0)" } })
        #expect(lines.count == 160, "lost or duplicated: \(lines.count)")
        #expect(Set(lines) == expected, "corrupted or lost lines")
    }

    @Test func aNaiveAppenderLosesLinesToTheSameEdits() throws {
        // The failure the protocol prevents, shown on the same kind of edits.
        let scratch = Scratch()
        _ = FileManager.default.createFile(atPath: scratch.path + "/daily.md", contents: nil)
        let (editor, _) = try Party.protocolStep(["remote-edits", scratch.path, "daily.md", "4"], wait: false)
        _ = try Party.protocolStep(["naive-appends", scratch.path, "daily.md", "300"])
        editor.waitUntilExit()
        let lines = scratch.lines("daily.md").filter { !$0.isEmpty }
        #expect(lines.count < 300, "the naive appender lost nothing this time: \(lines.count)")
    }

    @Test func aWriterThatWaitedWhileTheFileWasReplacedWritesIntoTheNewFile() throws {
        let scratch = Scratch()
        let file = scratch.path + "/note.md"
        try "old\n".write(toFile: file, atomically: false, encoding: .utf8)
        let holder = try Party.holding(scratch.path, "note.md", seconds: 0.5)
        let started = Date()
        #expect(try Party.append(file, "appended after waiting") == 0)
        #expect(Date().timeIntervalSince(started) > 0.2, "append did not wait for the holder")
        holder.waitUntilExit()
        #expect(scratch.lines("note.md") == ["old", "replaced", "appended after waiting", ""])
    }

    @Test func aWriterKilledMidRecordLeavesNoPartialRecordAndNoLock() throws {
        let scratch = Scratch()
        let file = scratch.path + "/note.md"
        try "before\n".write(toFile: file, atomically: false, encoding: .utf8)
        let (torn, _) = try Party.protocolStep(["torn", scratch.path, "note.md"])
        #expect(torn.terminationReason == .uncaughtSignal)
        #expect(try Data(contentsOf: URL(fileURLWithPath: file)).count == 7 + 5000, "the torn record is there")
        let started = Date()
        #expect(try Party.append(file, "after", timeout: "2") == 0)
        #expect(Date().timeIntervalSince(started) < 1.5, "the dead writer's lock was still held")
        #expect(scratch.lines("note.md") == ["before", "after", ""])
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/.note.md.sr-journal"))
    }

    @Test func killingAppendsAtRandomInstantsLeavesOnlyWholeLines() throws {
        let scratch = Scratch()
        let file = scratch.path + "/note.md"
        let long = String(repeating: "y", count: 100_000)  // 25 pages: journaled
        for round in 0..<12 {
            let (writer, _) = try Party.run([Party.binary, "append", file, long], wait: false)
            usleep(useconds_t(UInt32.random(in: 0...40_000) + UInt32(round) * 1000))
            kill(writer.processIdentifier, SIGKILL)
            writer.waitUntilExit()
            #expect(try Party.append(file, "short \(round)", timeout: "2") == 0)
        }
        for line in scratch.lines("note.md").dropLast() {
            #expect(line == long || line.hasPrefix("short "), "a partial record: \(line.prefix(20))… (\(line.count) bytes)")
        }
        #expect(scratch.lines("note.md").filter { $0.hasPrefix("short ") }.count == 12)
    }

    /// strace kills the appender at its first write, the journal's: a torn
    /// journal left behind refused every later writer (seen under load).
    @Test func aWriterKilledWhileWritingItsJournalStopsNoLaterWriter() throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "scripts/install-deps installs strace")
        let scratch = Scratch()
        let file = scratch.path + "/note.md"
        try "first\n".write(toFile: file, atomically: false, encoding: .utf8)
        let long = String(repeating: "y", count: 100_000)  // crosses pages: journaled
        let (killed, _) = try Party.run(["/usr/bin/strace", "-qq", "-o", "/dev/null", "-e", "trace=write",
                                         "-e", "inject=write:signal=KILL:when=1", Party.binary, "append", file, long])
        #expect(killed.terminationStatus != 0, "the appender was not killed")
        #expect(try Party.append(file, "next", timeout: "2") == 0)
        #expect(scratch.lines("note.md") == ["first", "next", ""])
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path) == ["note.md"])
    }

    @Test func aLockHeldTooLongIsATypedTimeout() throws {
        let scratch = Scratch()
        let file = scratch.path + "/note.md"
        _ = FileManager.default.createFile(atPath: file, contents: nil)
        let holder = try Party.holding(scratch.path, "note.md", seconds: 2)
        let started = Date()
        #expect(try Party.append(file, "too late", timeout: "0.3") == 75)
        #expect(Date().timeIntervalSince(started) < 1.5)
        holder.waitUntilExit()
        #expect(!scratch.lines("note.md").contains("too late"))
    }

    @Test func whatIsNotARegularFileIsRefusedWithoutHanging() throws {
        let scratch = Scratch()
        #expect(mkfifo(scratch.path + "/fifo", 0o600) == 0)
        #expect(symlink("/etc/passwd", scratch.path + "/link") == 0)
        try FileManager.default.createDirectory(atPath: scratch.path + "/folder", withIntermediateDirectories: false)
        for name in ["fifo", "link", "folder"] {
            #expect(try Party.append(scratch.path + "/" + name, "x", timeout: "1") == 125, "\(name)")
        }
        #expect(try Party.append(scratch.path + "/note", "two\nlines") == 65)
        _ = FileManager.default.createFile(atPath: scratch.path + "/.evicted.md.icloud", contents: Data())
        #expect(try Party.append(scratch.path + "/evicted.md", "x") == 75)
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/evicted.md"))
    }

    @Test func aLastLineWithoutNewlineIsEndedNotJoined() throws {
        let scratch = Scratch()
        try "typed in an editor".write(toFile: scratch.path + "/note.md", atomically: false, encoding: .utf8)
        try FileCoordinator().append(line: Array("appended".utf8), to: FilePath(scratch.path + "/note.md"))
        #expect(scratch.lines("note.md") == ["typed in an editor", "appended", ""])
    }

    @Test func replacingKeepsReadersWholeAndThreadsExcludeEachOther() throws {
        let scratch = Scratch()
        let path = FilePath(scratch.path + "/state.txt")
        let coordinator = FileCoordinator()
        try coordinator.replace(contentsOf: path, with: Array(String(repeating: "a", count: 100_000).utf8))
        let torn = ManagedCounter()
        DispatchQueue.concurrentPerform(iterations: 4) { worker in
            for round in 0..<25 {
                if worker == 0 {
                    let letter = round % 2 == 0 ? "b" : "a"
                    try? coordinator.replace(contentsOf: path, with: Array(String(repeating: letter, count: 100_000).utf8))
                } else {
                    try? coordinator.coordinate(readingItemAt: path) { item in
                        let data = try Data(contentsOf: URL(fileURLWithPath: item.path.string))
                        if data.count != 100_000 || Set(data).count != 1 { torn.add() }
                    }
                }
            }
        }
        #expect(torn.value == 0)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: scratch.path).filter { $0.contains(".sr-") }
        #expect(leftovers.isEmpty)
    }
}

final class ManagedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.lock(); count += 1; lock.unlock() }
    var value: Int { lock.lock(); defer { lock.unlock() }; return count }
}

/// The CLI with a scratch home of its own (its state, containers and HOME).
final class CLIHome {
    let home = Scratch()
    var path: String { home.path }
    var environment: [String: String] {
        ["XDG_DATA_HOME": home.path + "/data", "XDG_STATE_HOME": home.path + "/state", "XDG_RUNTIME_DIR": home.path + "/run", "HOME": home.path, "PATH": "/usr/bin:/bin"]
    }

    private func process(_ arguments: [String]) -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Party.binary)
        process.arguments = arguments
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        return process
    }

    /// Starts `sandboxed-run ARGUMENTS`, its output discarded.
    func start(_ arguments: [String]) throws -> Process {
        let process = process(arguments)
        try process.run()
        return process
    }

    /// Runs it to the end: its status and standard output.
    func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = process(arguments)
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let data = try out.fileHandleForReading.readAll()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}

/// A confined writer and an unconfined party see each other.
@Suite struct CoordinationAcrossTheSandboxTests {
    @Test func aConfinedAppendWaitsForAnUnconfinedHolderThenLands() throws {
        let cliHome = CLIHome()
        let cli = cliHome.run
        let container = try cli(["container", "path", "--app", "com.example.memo"]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        let documents = container + "/Documents"
        try "from the host\n".write(toFile: documents + "/daily.md", atomically: false, encoding: .utf8)
        let holder = try Party.holding(documents, "daily.md", seconds: 0.6)
        let started = Date()
        let confined = try cli(["run", "--app", "com.example.memo", "--", "/bin/sh", "-c",
                                "\"$SANDBOXED_RUN\" append Documents/daily.md 'from the sandbox' && echo landed"])
        #expect(confined.status == 0)
        #expect(confined.output == "landed\n")
        #expect(Date().timeIntervalSince(started) > 0.3, "the confined append did not wait")
        holder.waitUntilExit()
        let lines = try String(contentsOfFile: documents + "/daily.md", encoding: .utf8)
        #expect(lines == "from the host\nreplaced\nfrom the sandbox\n")
    }
}

/// The unconfined commands walk the user's path without following a link an app planted.
@Suite struct UnconfinedPathTests {
    @Test func aLinkPlantedInAGrantIsNotFollowedByAppendOrTheSimulator() throws {
        let home = CLIHome()
        func cli(_ arguments: [String]) throws -> Int32 { try home.start(arguments).waitStatus() }
        let vault = home.path + "/Vault", outside = home.path + "/outside"
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try "private\n".write(toFile: outside + "/notes.md", atomically: false, encoding: .utf8)
        #expect(try cli(["pick", "--app", "com.example.memo", "--select", vault, "-o", home.path + "/vault.bookmark"]) == 0)
        // What the app did from inside its grant:
        #expect(symlink(outside, vault + "/daily") == 0)
        // Without the walk, append would have written through the link (as the kernel would).
        #expect(try cli(["append", vault + "/daily/notes.md", "planted"]) == 125)
        #expect(try cli(["sync-simulator", vault + "/daily", "--seconds", "0.2", "--edit-rate", "100"]) == 125)
        #expect(try cli(["versions", "resolve", vault + "/daily/notes.md"]) == 125)
        #expect(try String(contentsOfFile: outside + "/notes.md", encoding: .utf8) == "private\n")
        // A link of the user's, outside every grant, is followed as before.
        #expect(symlink(vault, home.path + "/VaultLink") == 0)
        #expect(try cli(["append", home.path + "/VaultLink/today.md", "fine"]) == 0)
        #expect(try String(contentsOfFile: vault + "/today.md", encoding: .utf8) == "fine\n")
    }
}

/// The story on both sides of the sandbox boundary, with the real simulator:
/// a confined writer against an unconfined sync daemon, and the reverse.
@Suite struct SimulatorAcrossTheSandboxTests {
    static let lines = 150

    /// A home for the CLI, a vault granted read-write to `app`, and `cli`.
    final class Setup {
        let cliHome = CLIHome()
        var home: Scratch { cliHome.home }
        var vault: String { home.path + "/Vault" }
        var bookmark: String { home.path + "/vault.bookmark" }

        init() throws {
            try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
            try "# today\n".write(toFile: vault + "/daily.md", atomically: false, encoding: .utf8)
            #expect(try cli(["pick", "--app", "com.example.memo", "--select", vault, "-o", bookmark]).waitStatus() == 0)
        }

        func cli(_ arguments: [String]) throws -> Process { try cliHome.start(arguments) }

        /// The writer's lines, each exactly once and whole; the simulator's own lines aside.
        func checkNote(writer: String) {
            let lines = home.lines("Vault/daily.md").filter { !$0.isEmpty && !$0.hasPrefix("remote edit ") && $0 != "# today" }
            let expected = (1...SimulatorAcrossTheSandboxTests.lines).map { "\(writer) \($0)" }
            #expect(lines.count == expected.count, "lost or duplicated: \(lines.count) of \(expected.count)")
            #expect(Set(lines) == Set(expected), "corrupted or lost: \(Set(lines).symmetricDifference(expected).sorted().prefix(5))")
        }
    }

    @Test func aConfinedWriterAgainstAnUnconfinedSimulatorLosesNothing() throws {
        let setup = try Setup()
        let simulator = try setup.cli(["sync-simulator", setup.vault, "--seconds", "60", "--edit-rate", "300", "--evict-rate", "0"])
        defer { if simulator.isRunning { kill(simulator.processIdentifier, SIGKILL) } }
        let script = "for i in $(seq 1 \(Self.lines)); do \"$SANDBOXED_RUN\" append \"$SANDBOX_GRANT_VAULT/daily.md\" \"confined $i\" || exit 1; done"
        let writer = try setup.cli(["run", "--app", "com.example.memo", "--grant", "VAULT=" + setup.bookmark, "--", "/bin/sh", "-c", script])
        writer.waitUntilExit()
        kill(simulator.processIdentifier, SIGTERM)
        simulator.waitUntilExit()
        #expect(writer.terminationStatus == 0)
        #expect(simulator.terminationStatus == 0)
        let edits = setup.home.lines("Vault/daily.md").filter { $0.hasPrefix("remote edit ") }.count
        #expect(edits > 20, "the simulator's edits must really interleave: \(edits)")
        setup.checkNote(writer: "confined")
    }

    @Test func anUnconfinedWriterAgainstAConfinedSimulatorLosesNothing() throws {
        let setup = try Setup()
        let simulator = try setup.cli(["run", "--app", "com.example.memo", "--grant", "VAULT=" + setup.bookmark, "--", "/bin/sh", "-c",
                                       "exec \"$SANDBOXED_RUN\" sync-simulator \"$SANDBOX_GRANT_VAULT\" --seconds 60 --edit-rate 300 --evict-rate 0"])
        defer { if simulator.isRunning { kill(simulator.processIdentifier, SIGKILL) } }
        Thread.sleep(forTimeInterval: 0.3)  // the simulator is running inside
        for i in 1...Self.lines {
            #expect(try Party.append(setup.vault + "/daily.md", "unconfined \(i)") == 0)
        }
        kill(simulator.processIdentifier, SIGTERM)  // forwarded to the command by the launcher
        simulator.waitUntilExit()
        #expect(simulator.terminationStatus == 0)
        let edits = setup.home.lines("Vault/daily.md").filter { $0.hasPrefix("remote edit ") }.count
        #expect(edits > 20, "the simulator's edits must really interleave: \(edits)")
        setup.checkNote(writer: "unconfined")
    }
}

extension Process {
    func waitStatus() -> Int32 { waitUntilExit(); return terminationStatus }
}

/// `coordinate` hands COMMAND a path through the descriptor it locked: an app
/// that swaps a name for a link while COMMAND runs (here COMMAND plays the
/// app, so the race is won every time) cannot send it outside the vault.
@Suite struct CoordinatedPathSwapTests {
    final class Vault {
        let scratch = Scratch()
        var vault: String { scratch.path + "/vault" }
        var outside: String { scratch.path + "/outside" }
        init() throws {
            try FileManager.default.createDirectory(atPath: vault + "/sub", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            try "note\n".write(toFile: vault + "/note.md", atomically: false, encoding: .utf8)
            try "sub note\n".write(toFile: vault + "/sub/note.md", atomically: false, encoding: .utf8)
            try "precious\n".write(toFile: outside + "/victim.txt", atomically: false, encoding: .utf8)
            try "precious\n".write(toFile: outside + "/note.md", atomically: false, encoding: .utf8)
        }
        func coordinate(_ arguments: [String], _ script: String) throws -> (status: Int32, output: String) {
            let (process, out) = try Party.run([Party.binary, "coordinate"] + arguments + ["--", "/bin/sh", "-c", script])
            return try (process.terminationStatus, String(decoding: out.fileHandleForReading.readAll(), as: UTF8.self))
        }
        var victim: String { (try? String(contentsOfFile: outside + "/victim.txt", encoding: .utf8)) ?? "gone" }
        /// What the app does while COMMAND runs: the note becomes a link to the victim.
        var swapNote: String { "rm '\(vault)/note.md'; ln -s '\(outside)/victim.txt' '\(vault)/note.md'" }
    }

    @Test func aMergingWriterFollowsNoLinkSwappedInForTheItem() throws {
        let v = try Vault()
        let result = try v.coordinate(["--write", v.vault + "/note.md"],
            v.swapNote + "; echo 'user line' >> \"$COORDINATED_PATH\"")
        #expect(result.status == 0)
        #expect(v.victim == "precious\n", "the write went outside the vault")
    }

    @Test func aReplacingWriterFollowsNoLinkSwappedInForTheTemporaryFileAndSaysSo() throws {
        let v = try Vault()
        let result = try v.coordinate(["--write", v.vault + "/note.md", "--intent", "replacing"],
            "for f in '\(v.vault)'/.note.md.sr-*; do rm \"$f\"; ln -s '\(v.outside)/victim.txt' \"$f\"; done; echo 'new contents' > \"$COORDINATED_PATH\"")
        #expect(v.victim == "precious\n", "the outside file was overwritten")
        #expect(result.status == 125, "a swapped replacement must not be reported as done")
    }

    @Test func aReaderReadsTheLockedFileNotALinkSwappedIn() throws {
        let v = try Vault()
        let result = try v.coordinate(["--read", v.vault + "/note.md"],
            v.swapNote + "; cat \"$COORDINATED_PATH\"")
        #expect(result.status == 0)
        #expect(result.output == "note\n", "read through the swapped link: \(result.output)")
    }

    @Test func aDeleterDeletesInTheLockedFolderNotAFolderSwappedIn() throws {
        let v = try Vault()
        let result = try v.coordinate(["--write", v.vault + "/sub/note.md", "--intent", "deleting"],
            "mv '\(v.vault)/sub' '\(v.vault)/moved'; ln -s '\(v.outside)' '\(v.vault)/sub'; rm \"$COORDINATED_PATH\"")
        #expect(result.status == 0)
        #expect(FileManager.default.fileExists(atPath: v.outside + "/note.md"), "deleted outside the vault")
        #expect(!FileManager.default.fileExists(atPath: v.vault + "/moved/note.md"))
    }

    @Test func readingAFileThatDoesNotExistIsAnError() throws {
        let v = try Vault()
        #expect(try v.coordinate(["--read", v.vault + "/absent.md"], "true").status == 74)
    }
}
