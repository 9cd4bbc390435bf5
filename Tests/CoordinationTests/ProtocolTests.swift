import Foundation
import SystemPackage
import Testing
@testable import Coordination

/// `sandboxed-run ARGUMENTS` run through /bin/sh, so arguments may be bytes
/// that are not UTF-8 (`$(printf ...)`): its status, stdout and stderr.
func shell(_ script: String, _ arguments: [String] = [], umask: String = "022", user: String? = nil) throws -> (status: Int32, output: String, error: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    let prefix = user.map { ["/usr/bin/setpriv", "--reuid", $0, "--regid", $0, "--clear-groups", "/bin/sh"] } ?? []
    if prefix.isEmpty {
        process.arguments = ["-c", "umask \(umask); " + script, Party.binary] + arguments
    } else {
        process.executableURL = URL(fileURLWithPath: prefix[0])
        process.arguments = Array(prefix.dropFirst()) + ["-c", "umask \(umask); " + script, Party.binary] + arguments
    }
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    try process.run()
    let (output, error) = try readOutputs(out, err)
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: output, as: UTF8.self), String(decoding: error, as: UTF8.self))
}

/// Reading a child's output in the tests' shared process. Foundation's
/// `readDataToEndOfFile()` traps on a read error, ending every test at once;
/// `readToEnd()` throws, failing one. And stdout and stderr are read
/// together: read one after the other, a child that fills the second pipe
/// (64 KiB) while the first is waited on never ends.
extension FileHandle {
    /// Everything until end of file.
    func readAll() throws -> Data { try readToEnd() ?? Data() }
}

/// The child's stdout and stderr, each to its end, read at the same time.
func readOutputs(_ out: Pipe, _ err: Pipe) throws -> (stdout: Data, stderr: Data) {
    final class Reading: @unchecked Sendable {
        var result: Result<Data, any Error> = .success(Data())
        let done = DispatchSemaphore(value: 0)
    }
    let reading = Reading()
    let errors = err.fileHandleForReading
    Thread {
        reading.result = Result { try errors.readAll() }
        reading.done.signal()
    }.start()
    let stdout = Result { try out.fileHandleForReading.readAll() }
    // A failed stdout read stops reading it: the child gets EPIPE rather than wait for us.
    if case .failure = stdout { try? out.fileHandleForReading.close() }
    reading.done.wait()  // the thread must not outlive `err`, whose descriptor is then closed
    return (try stdout.get(), try reading.result.get())
}

func mode(_ path: String) -> mode_t {
    var status = stat()
    return lstat(path, &status) == 0 ? status.st_mode & 0o7777 : 0o7777
}

func owner(_ path: String) -> uid_t {
    var status = stat()
    return lstat(path, &status) == 0 ? status.st_uid : uid_t.max
}

/// The harness itself (`shell`): a child that writes more to stderr than a
/// pipe holds before it ends its stdout completes; read stdout first, it
/// hung until `timeout` killed it (status 137 after 20 s).
@Suite struct HarnessTests {
    @Test func aProgramFillingStderrBeforeStdoutCompletes() throws {
        let result = try shell("timeout -s KILL 20 sh -c \"head -c 204800 /dev/zero | tr '\\\\0' e >&2; echo out\"")
        #expect(result.status == 0 && result.output == "out\n", "\(result.status) \(result.output)")
        #expect(result.error.utf8.count == 204800)
    }
}

/// Issue 21, §1: the race that lost acknowledged appends, made deterministic, and the simulator's half of it.
@Suite struct EvictionRaceTests {
    /// A writer waits on the note while an eviction holds it; the eviction
    /// leaves only the placeholder. The writer used to re-open the name with
    /// O_CREAT, making a second file beside the placeholder, and exit 0.
    @Test func aWriterThatLostTheRaceToAnEvictionFindsThePlaceholderAndCreatesNothing() throws {
        let scratch = Scratch()
        try "# note\nbefore\n".write(toFile: scratch.path + "/note.md", atomically: false, encoding: .utf8)
        let (evictor, out) = try Party.protocolStep(["evict-held", scratch.path, "note.md", "0.6"], wait: false)
        #expect(String(decoding: out.fileHandleForReading.availableData, as: UTF8.self).hasPrefix("held"))
        let started = Date()
        let status = try Party.append(scratch.path + "/note.md", "lost line", timeout: "5")
        evictor.waitUntilExit()
        #expect(Date().timeIntervalSince(started) > 0.3, "the append did not wait for the eviction")
        #expect(status == 75, "the append must say 'placeholder, try later', not land beside it")
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/note.md"), "the writer re-created the evicted note")
        #expect(scratch.lines(".note.md.icloud.data") == ["# note", "before", ""])
    }

    /// The issue's repro: the simulator evicted a file written beside its own
    /// placeholder over its earlier copy (O_TRUNC). Two versions make a conflict version.
    @Test func aFileWrittenWhileEvictedNeverOverwritesTheEvictedCopy() throws {
        let scratch = Scratch()
        let run = "\"$0\" sync-simulator \"$1\" --edit-rate 0 --evict-rate 1000 --seconds"
        try "old\n".write(toFile: scratch.path + "/n.md", atomically: false, encoding: .utf8)
        #expect(try shell(run + " 0.5 --leave-placeholders", [scratch.path]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/n.md"))
        try "new\n".write(toFile: scratch.path + "/n.md", atomically: false, encoding: .utf8)  // outside the protocol
        #expect(try shell(run + " 1", [scratch.path]).status == 0)
        let found = try shell("grep -rl old \"$1\"", [scratch.path]).output
        #expect(found.contains("/.sandboxed-run-versions/n.md/"), "the evicted 'old' is gone: \(found)")
        #expect(scratch.lines("n.md") == ["new", ""])
        let listed = try shell("\"$0\" versions list \"$1\"", [scratch.path + "/n.md"]).output
        #expect(listed.contains("remote"), "\(listed)")
    }

    /// A simulator killed mid-edit leaves `.NAME.sr-<hex>`: the next one removes
    /// it, and never one that a live party is writing (it holds the item's lock).
    @Test func temporariesOfKilledPartiesAreRemovedButNotOnesInUse() throws {
        let scratch = Scratch()
        try "note\n".write(toFile: scratch.path + "/note.md", atomically: false, encoding: .utf8)
        try "gone.md's\n".write(toFile: scratch.path + "/.gone.md.sr-00112233445566aa", atomically: false, encoding: .utf8)
        try "half an edit\n".write(toFile: scratch.path + "/.note.md.sr-0123456789abcdef", atomically: false, encoding: .utf8)
        let replacing = try CLIHome().start(["coordinate", "--write", scratch.path + "/note.md", "--intent", "replacing", "--",
                                             "/bin/sh", "-c", "echo replaced > \"$COORDINATED_PATH\"; sleep 1.5"])
        let simulator = try shell("\"$0\" sync-simulator \"$1\" --edit-rate 0 --seconds 1", [scratch.path])
        replacing.waitUntilExit()
        #expect(simulator.status == 0)
        #expect(replacing.terminationStatus == 0, "the live replacement's temporary file was removed under it")
        #expect(scratch.lines("note.md") == ["replaced", ""])
        let left = try FileManager.default.contentsOfDirectory(atPath: scratch.path).sorted()
        #expect(left == ["note.md"], "\(left); simulator: \(simulator.output)")
    }
}

/// "Exit 0 means durable": the file, then its folder, flushed before success; the eviction's stub before the file moves.
@Suite struct DurabilityTests {
    static let strace = FileManager.default.isExecutableFile(atPath: "/usr/bin/strace")

    /// strace -y names each descriptor's file: the calls, in order, as "call path".
    static func traced(_ arguments: [String], calls: String) throws -> [String] {
        let log = NSTemporaryDirectory() + "strace-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: log) }
        let (process, _) = try Party.run(["/usr/bin/strace", "-f", "-qq", "-y", "-o", log, "-e", "trace=" + calls, Party.binary] + arguments)
        #expect(process.terminationStatus == 0)
        return (try String(contentsOfFile: log, encoding: .utf8)).split(separator: "\n").map { line in
            // "PID call(3</path>, ..." -> "call /path" (renames keep their arguments)
            let text = line.drop { $0 != " " }.drop { $0 == " " }
            guard let open = text.firstIndex(of: "(") else { return String(text) }
            let call = text[..<open]
            if call.hasPrefix("rename") { return String(text) }
            let path = text.range(of: "<").flatMap { start in text[start.upperBound...].firstIndex(of: ">").map { String(text[start.upperBound..<$0]) } }
            return call + " " + (path ?? "")
        }
    }

    @Test(.enabled(if: strace, "scripts/install-deps installs strace"))
    func anAppendFlushesTheFileThenTheFolderBeforeItSucceeds() throws {
        let scratch = Scratch()
        let folder = URL(fileURLWithPath: scratch.path).resolvingSymlinksInPath().path
        let calls = try Self.traced(["append", folder + "/note.md", "a durable line"], calls: "write,fsync,fdatasync")
        let wrote = try #require(calls.firstIndex(of: "write \(folder)/note.md"), "\(calls)")
        let file = calls.lastIndex { $0.hasPrefix("fsync \(folder)/note.md") || $0.hasPrefix("fdatasync \(folder)/note.md") }
        let dir = calls.lastIndex(of: "fsync \(folder)")
        #expect(file.map { $0 > wrote } == true, "the note was not flushed after the write: \(calls)")
        #expect(dir.map { d in file.map { d > $0 } ?? false } == true, "the folder was not flushed after the note: \(calls)")
    }

    @Test(.enabled(if: strace, "scripts/install-deps installs strace"))
    func anEvictionMakesItsStubDurableBeforeTheFileMoves() throws {
        let scratch = Scratch()
        let folder = URL(fileURLWithPath: scratch.path).resolvingSymlinksInPath().path
        try "acknowledged\n".write(toFile: folder + "/note.md", atomically: false, encoding: .utf8)
        let calls = try Self.traced(["sync-simulator", folder, "--edit-rate", "0", "--evict-rate", "1000", "--seconds", "0.3", "--leave-placeholders"],
                                    calls: "fsync,fdatasync,rename,renameat,renameat2")
        let moved = try #require(calls.firstIndex { $0.hasPrefix("rename") && $0.contains("\"note.md\"") && $0.contains(".note.md.icloud.data") }, "\(calls)")
        let stub = try #require(calls.firstIndex { $0.hasPrefix("rename") && $0.contains("\".note.md.icloud\"") }, "no stub renamed into place: \(calls)")
        #expect(stub < moved)
        #expect(calls[..<stub].contains { $0.hasPrefix("fsync \(folder)/.note.md.sr-") }, "the stub was not flushed before it took its name: \(calls)")
        #expect(calls[stub..<moved].contains("fsync \(folder)"), "the folder was not flushed between the stub and the move: \(calls)")
        #expect(calls[moved...].contains("fsync \(folder)"), "the folder was not flushed after the move: \(calls)")
    }
}

/// Issue 21, §4: modes, long names, names that are not UTF-8, and COMMAND's own open file description.
@Suite struct FilesKeepTheirModeAndNameTests {
    /// Eviction then materialisation kept a 0600 note 0600 under umask 077, and
    /// copies (the simulator's copy, conflict versions) are no more readable than it.
    @Test func evictionMaterialisationAndConflictVersionsKeepAPrivateNotePrivate() throws {
        let scratch = Scratch()
        let note = scratch.path + "/n.md"
        try "secret\n".write(toFile: note, atomically: false, encoding: .utf8)
        #expect(chmod(note, 0o600) == 0)
        let run = "\"$0\" sync-simulator \"$1\" --edit-rate 0 --evict-rate 1000 --seconds"
        for umask in ["077", "022", "000"] {
            #expect(try shell(run + " 0.4 --leave-placeholders", [scratch.path], umask: umask).status == 0)
            #expect(mode(scratch.path + "/.n.md.icloud.data") == 0o600, "umask \(umask)")
            #expect(mode(scratch.path + "/.n.md.icloud") & 0o077 == 0, "umask \(umask): the stub is more open than the note")
            #expect(try shell("\"$0\" sync-simulator \"$1\" --edit-rate 0 --seconds 0.2", [scratch.path], umask: umask).status == 0)
            #expect(mode(note) == 0o600, "umask \(umask): materialised as \(String(mode(note), radix: 8))")
        }
        // Written while evicted: the copy becomes a conflict version, as private as the note.
        #expect(try shell(run + " 0.4 --leave-placeholders", [scratch.path], umask: "000").status == 0)
        try "new\n".write(toFile: note, atomically: false, encoding: .utf8)
        #expect(chmod(note, 0o600) == 0)
        #expect(try shell("\"$0\" sync-simulator \"$1\" --edit-rate 0 --seconds 0.3", [scratch.path], umask: "000").status == 0)
        let versions = scratch.path + "/.sandboxed-run-versions/n.md"
        let kept = try FileManager.default.contentsOfDirectory(atPath: versions)
        #expect(kept.count == 1)
        #expect(mode(versions) == 0o700, "versions folder \(String(mode(versions), radix: 8))")
        for version in kept { #expect(mode(versions + "/" + version) == 0o600) }
        // Conflicts the simulator makes (copies): the note's bits, whatever the umask.
        #expect(chmod(note, 0o640) == 0)
        let conflicts = try shell("\"$0\" sync-simulator \"$1\" --edit-rate 0 --conflict-rate 1000 --seconds 0.5", [scratch.path], umask: "000")
        #expect(conflicts.output.contains("conflicts") && !conflicts.output.contains("conflicts 0,"), "\(conflicts.output)")
        for version in try FileManager.default.contentsOfDirectory(atPath: versions) {
            #expect([0o600, 0o640].contains(mode(versions + "/" + version)), "\(version): \(String(mode(versions + "/" + version), radix: 8))")
        }
        #expect(mode(note) == 0o640)
    }

    /// As root, the simulator's copies and versions of another user's note keep that user as owner.
    @Test(.enabled(if: getuid() == 0, "needs root to own files as another user"))
    func aRootSimulatorKeepsTheOwnerOfAnotherUsersNote() throws {
        let scratch = Scratch()
        let note = scratch.path + "/n.md"
        try "theirs\n".write(toFile: note, atomically: false, encoding: .utf8)
        #expect(chown(note, 65534, 65534) == 0 && chmod(note, 0o640) == 0)
        #expect(try shell("\"$0\" sync-simulator \"$1\" --edit-rate 50 --conflict-rate 200 --seconds 0.6", [scratch.path]).status == 0)
        #expect(owner(note) == 65534, "the note became root's")
        #expect(mode(note) == 0o640)
        let versions = scratch.path + "/.sandboxed-run-versions/n.md"
        let kept = try FileManager.default.contentsOfDirectory(atPath: versions)
        #expect(!kept.isEmpty)
        for version in kept { #expect(owner(versions + "/" + version) == 65534) }
        #expect(owner(versions) == 65534)
    }

    /// A simulator that may not give a copy the original's owner (not root)
    /// keeps only the owner's bits: the copy is never readable by more people.
    @Test(.enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"), "needs root to set up, setpriv to drop"))
    func anUnprivilegedSimulatorNarrowsCopiesItCannotGiveTheOwner() throws {
        let scratch = Scratch()
        let vault = scratch.path + "/vault"
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: false)
        #expect(chown(vault, 65534, 65534) == 0 && chmod(scratch.path, 0o755) == 0)
        // root's, and anyone may write it (a writer needs write access for the lock).
        try "root's\n".write(toFile: vault + "/n.md", atomically: false, encoding: .utf8)
        #expect(chmod(vault + "/n.md", 0o666) == 0)
        let result = try shell("\"$0\" sync-simulator \"$1\" --edit-rate 100 --conflict-rate 300 --seconds 0.8", [vault], user: "65534")
        #expect(result.status == 0, "\(result.error)")
        #expect(result.output.contains("edits") && !result.output.contains("edits 0,"), "\(result.output)")
        #expect(owner(vault + "/n.md") == 65534)
        #expect(mode(vault + "/n.md") == 0o600, "replaced by a copy readable by others: \(String(mode(vault + "/n.md"), radix: 8))")
        let versions = vault + "/.sandboxed-run-versions/n.md"
        let open = ((try? FileManager.default.contentsOfDirectory(atPath: versions)) ?? []).filter { mode(versions + "/" + $0) & 0o077 != 0 }
        #expect(open.isEmpty, "versions readable by others: \(open)")
    }

    /// Every name the filesystem accepts works: the siblings of a long name are hashed.
    @Test func namesUpToNameMaxCanBeAppendedReplacedEvictedAndBroughtBack() throws {
        for length in [234, 235, 237, 240, 247, 255] {
            let scratch = Scratch()
            let name = String(repeating: "n", count: length - 3) + ".md"
            let note = scratch.path + "/" + name
            let line = String(repeating: "y", count: 90)
            // 60 lines of 91 bytes cross pages: journaled appends, past the 4,000 bytes version 1 stopped at.
            let appended = try shell("i=0; while [ $i -lt 60 ]; do \"$0\" append \"$1\" \"$i $2\" || exit $?; i=$((i+1)); done", [note, line])
            #expect(appended.status == 0, "\(length): \(appended.error)")
            #expect(scratch.lines(name).count == 61, "\(length)")
            let replaced = try shell("\"$0\" coordinate --write \"$1\" --intent replacing -- /bin/sh -c 'cat \"$2\" > \"$COORDINATED_PATH\"; echo replaced >> \"$COORDINATED_PATH\"' sh \"$1\"", [note])
            #expect(replaced.status == 0, "\(length): \(replaced.error)")
            #expect(scratch.lines(name).suffix(2) == ["replaced", ""], "\(length)")
            #expect(try shell("\"$0\" sync-simulator \"$1\" --edit-rate 0 --evict-rate 1000 --seconds 0.3 --leave-placeholders", [scratch.path]).status == 0)
            #expect(!FileManager.default.fileExists(atPath: note), "\(length): not evicted")
            #expect(try Placeholder.status(of: FilePath(note)) == .notDownloaded, "\(length)")
            // A writer asks for it; a simulator brings it back; the line lands.
            let simulator = try CLIHome().start(["sync-simulator", scratch.path, "--edit-rate", "0", "--seconds", "3"])
            let after = try shell("\"$0\" append --download 5 \"$1\" 'after download'", [note])
            simulator.waitUntilExit()
            #expect(after.status == 0, "\(length): \(after.error)")
            #expect(scratch.lines(name).suffix(2) == ["after download", ""], "\(length)")
            let left = try FileManager.default.contentsOfDirectory(atPath: scratch.path)
            #expect(left == [name], "\(length): \(left)")
        }
    }

    @Test func aFolderWhoseNameIsNotUTF8WorksWithEveryCommand() throws {
        let scratch = Scratch()
        let folder = "\"$1\"/\"$(printf 'caf\\351')\""
        #expect(try shell("mkdir " + folder, [scratch.path]).status == 0)
        let appended = try shell("\"$0\" append " + folder + "/n.md 'in a latin-1 folder'", [scratch.path])
        #expect(appended.status == 0, "\(appended.error)")
        let read = try shell("\"$0\" coordinate --read " + folder + "/n.md -- /bin/sh -c 'cat \"$COORDINATED_PATH\"'", [scratch.path])
        #expect(read.status == 0 && read.output == "in a latin-1 folder\n", "\(read)")
        #expect(try shell("\"$0\" sync-simulator " + folder + " --edit-rate 100 --seconds 0.3", [scratch.path]).status == 0)
        #expect(try shell("\"$0\" versions list " + folder + "/n.md", [scratch.path]).status == 0)
        // A name that is not UTF-8, in it, long enough to be hashed, and the record's own bytes.
        let long = "\"$(printf 'caf\\351%0240d' 0)\""
        let bytes = try shell("\"$0\" append " + folder + "/" + long + " \"$(printf 'r\\351sum\\351')\" && od -An -tx1 " + folder + "/" + long + " | tr -d ' \\n'", [scratch.path])
        #expect(bytes.status == 0, "\(bytes.error)")
        #expect(bytes.output == "72e973756de90a", "the record's bytes were altered: \(bytes.output)")
    }

    /// COMMAND gets its own open of the inode: a background child of COMMAND
    /// holding it does not keep the note locked after coordinate returned.
    @Test func aBackgroundChildOfCommandDoesNotKeepTheNoteLocked() throws {
        let scratch = Scratch()
        let note = scratch.path + "/note.md"
        try "note\n".write(toFile: note, atomically: false, encoding: .utf8)
        // One script, timed inside: the background child may hold descriptors the test's pipes wait on.
        let script = """
            start=$(date +%s%N)
            "$0" coordinate "$@" -- /bin/sh -c 'sleep 5 </dev/null >/dev/null 2>&1 & '"$COMMAND" "$NOTE" </dev/null >/dev/null 2>&1 || exit 90
            "$0" append --timeout 1 "$NOTE" "after $2" </dev/null >/dev/null 2>&1; status=$?
            echo "$status $(( ($(date +%s%N) - start) / 1000000 ))"
            """
        for (options, write) in [(["--write", note, "--intent", "merging"], "echo merging >> \"$COORDINATED_PATH\""),
                                 (["--write", note, "--intent", "replacing"], "cat \"$0\" > \"$COORDINATED_PATH\""),
                                 (["--read", note], "cat \"$COORDINATED_PATH\" >/dev/null")] {
            let result = try shell("NOTE=\"$1\" COMMAND=\"$2\"; shift 2; " + script, [note, write] + options)
            let fields = result.output.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            #expect(fields.count == 2, "\(options): \(result)")
            #expect(fields.first == 0, "\(options): the note stayed locked by COMMAND's background child (append exited \(fields.first ?? -1))")
            #expect((fields.last ?? 99_999) < 4_000, "\(options): the background child had ended; the test proves nothing")
        }
        #expect(scratch.lines("note.md").filter { $0.hasPrefix("after ") }.count == 3)
    }
}

/// Version 2 refuses version 1's files rather than reading them as its own.
@Suite struct ProtocolVersionTests {
    @Test func aVersionOneJournalIsRefusedNamingItsVersion() throws {
        let scratch = Scratch()
        try "before\n".write(toFile: scratch.path + "/note.md", atomically: false, encoding: .utf8)
        try "sandboxed-run journal 1\n7 5000\n".write(toFile: scratch.path + "/.note.md.sr-journal", atomically: false, encoding: .utf8)
        let result = try shell("\"$0\" append \"$1\" line", [scratch.path + "/note.md"])
        #expect(result.status == 125)
        #expect(result.error.contains("protocol version 1"), "\(result.error)")
        #expect(scratch.lines("note.md") == ["before", ""])
    }

    @Test func aVersionOnePlaceholderIsLeftAloneAndReported() throws {
        let scratch = Scratch()
        // As version 1 evicted: a stub without the version key, and the copy.
        _ = FileManager.default.createFile(atPath: scratch.path + "/.n.md.icloud", contents: Data(Self.versionOneStub()))
        try "old\n".write(toFile: scratch.path + "/.n.md.icloud.data", atomically: false, encoding: .utf8)
        let result = try shell("\"$0\" sync-simulator \"$1\" --edit-rate 0 --evict-rate 1000 --seconds 0.3", [scratch.path])
        #expect(result.status == 0)
        #expect(result.error.contains("protocol version 1"), "\(result.error)")
        #expect(result.output.contains("refused 1"), "\(result.output)")
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/n.md"), "a version 1 placeholder was read as this version's")
        #expect(try shell("\"$0\" append \"$1\" x", [scratch.path + "/n.md"]).status == 75)  // still a placeholder for writers
    }

    /// Version 1 named a long name's stub `.NAME.icloud`; version 2 hashes it and must not overlook the old one.
    @Test func aVersionOnePlaceholderOfALongNameIsNotOverlooked() throws {
        let scratch = Scratch()
        let name = String(repeating: "n", count: 237) + ".md"
        _ = FileManager.default.createFile(atPath: scratch.path + "/." + name + ".icloud", contents: Data())
        let result = try shell("\"$0\" append \"$1\" x", [scratch.path + "/" + name])
        #expect(result.status == 125)
        #expect(result.error.contains("protocol version 1"), "\(result.error)")
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/" + name))
    }

    /// A version 1 stub: the same dictionary without SRCoordinationProtocolVersion and SRItemNameBytes.
    static func versionOneStub() -> [UInt8] {
        var bytes = Array("bplist00".utf8)
        let objects: [[UInt8]] = [[0xD2, 1, 2, 3, 4], [0x5C] + Array("NSURLNameKey".utf8), [0x5F, 0x10, 16] + Array("NSURLFileSizeKey".utf8),
                                  [0x54] + Array("n.md".utf8), [0x13, 0, 0, 0, 0, 0, 0, 0, 4]]
        var offsets: [Int] = []
        for object in objects { offsets.append(bytes.count); bytes += object }
        let table = bytes.count
        for offset in offsets { bytes += [UInt8(offset >> 8), UInt8(offset & 0xff)] }
        bytes += [0, 0, 0, 0, 0, 0, 2, 1]
        for value in [objects.count, 0, table] { bytes += (0..<8).reversed().map { UInt8(truncatingIfNeeded: UInt64(value) >> (8 * UInt64($0))) } }
        return bytes
    }
}

/// §5: seconds given as options are checked: a usage error (125) naming the value and the range, never a crash.
@Suite struct SecondsOptionTests {
    @Test func outOfRangeSecondsAreUsageErrors() throws {
        let scratch = Scratch()
        let note = scratch.path + "/note.md"
        let cases: [[String]] = [
            ["append", "--timeout", "1e300", note, "x"], ["append", "--timeout=nan", note, "x"], ["append", "--timeout=-1", note, "x"],
            ["append", "--download", "1e300", note, "x"], ["append", "--download=inf", note, "x"],
            ["coordinate", "--timeout", "1e300", "--write", note, "--", "/bin/true"], ["coordinate", "--timeout=nan", "--read", note, "--", "/bin/true"],
            ["sync-simulator", "--seconds", "1e300", scratch.path], ["sync-simulator", "--seconds=nan", scratch.path],
        ]
        for arguments in cases {
            let result = try shell("exec \"$0\" \"$@\"", arguments)
            #expect(result.status == 125, "\(arguments): \(result.status)")
            #expect(result.error.contains("from 0 to 1000000"), "\(arguments): \(result.error)")
        }
        #expect(!FileManager.default.fileExists(atPath: note))
        #expect(try shell("exec \"$0\" append --timeout 0.5 --download 0 \"$1\" fine", [note]).status == 0)
    }
}

@Suite struct ItemNamesTests {
    @Test func theHashIsSHA256AndTheStemsAreWhatPythonComputes() throws {
        #expect(SHA256.hash(Array("abc".utf8)).map { String(format: "%02x", $0) }.joined()
            == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(SHA256.hash([]).map { String(format: "%02x", $0) }.joined()
            == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let names: [[UInt8]] = [Array("daily.md".utf8), [UInt8](repeating: 0x61, count: 234), [UInt8](repeating: 0x61, count: 235),
                                [0x63, 0x61, 0x66, 0xe9] + [UInt8](repeating: 0x7a, count: 251), [UInt8](repeating: 0x62, count: 64)]
        let script = Party.protocolPython + "\nimport sys\nfor n in sys.argv[1:]: print(stem(bytes.fromhex(n)).hex())\n"
        let hex = { (bytes: [UInt8]) in bytes.map { String(format: "%02x", $0) }.joined() }
        let (python, out) = try Party.run(["/usr/bin/python3", "-c", script] + names.map(hex))
        #expect(python.terminationStatus == 0)
        let stems = try String(decoding: out.fileHandleForReading.readAll(), as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(stems == names.map { hex(ItemNames.stem(of: $0)) })
        #expect(ItemNames.stem(of: [UInt8](repeating: 0x61, count: 234)).count == 235)
        #expect(ItemNames.stem(of: [UInt8](repeating: 0x61, count: 235)).count == 37)
        // The longest sibling of every length fits in a name.
        for length in 1...255 {
            let name = ItemNames.terminated([UInt8](repeating: 0x61, count: length))
            #expect(ItemNames.temporary(of: name).count - 1 <= 255)
            for kind in ItemNames.Sibling.allCases { #expect(ItemNames.sibling(kind, of: name).count - 1 <= 255) }
        }
    }
}

/// The app can write the folder: it plants links, FIFOs, folders, huge files and
/// fake stubs where the protocol keeps its files, and holds the folder lock.
@Suite struct HostileFolderTests {
    @Test func whatTheAppPlantsBesideEvictedNotesIsNeverFollowedOpenedOrReadWhole() throws {
        let scratch = Scratch(), outside = Scratch()
        let vault = scratch.path
        try "secret\n".write(toFile: outside.path + "/secret", atomically: false, encoding: .utf8)
        try "mine\n".write(toFile: vault + "/n.md", atomically: false, encoding: .utf8)
        #expect(try shell("\"$0\" sync-simulator \"$1\" --edit-rate 0 --evict-rate 1000 --seconds 0.3 --leave-placeholders", [vault]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: vault + "/n.md"))
        func stub(_ name: String) -> Data { Data(Placeholder.encode(.init(name: FilePath(name), size: 3))) }
        #expect(symlink(outside.path + "/secret", vault + "/.n.md.icloud.download") == 0)  // a request that is a link
        _ = FileManager.default.createFile(atPath: vault + "/.fifo.md.icloud", contents: stub("fifo.md"))
        #expect(mkfifo(vault + "/.fifo.md.icloud.data", 0o600) == 0)
        _ = FileManager.default.createFile(atPath: vault + "/.link.md.icloud", contents: stub("link.md"))
        #expect(symlink(outside.path + "/secret", vault + "/.link.md.icloud.data") == 0)
        _ = FileManager.default.createFile(atPath: vault + "/.big.md.icloud", contents: stub("big.md"))
        _ = FileManager.default.createFile(atPath: vault + "/.big.md.icloud.data", contents: nil)
        #expect(truncate(vault + "/.big.md.icloud.data", 1 << 30) == 0)  // 1 GiB, sparse
        _ = FileManager.default.createFile(atPath: vault + "/.liar.md.icloud", contents: stub("someone-else.md"))
        try "liar\n".write(toFile: vault + "/.liar.md.icloud.data", atomically: false, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: vault + "/.folder.md.icloud", withIntermediateDirectories: false)
        let started = Date()
        let result = try shell("/usr/bin/time -f 'peak %M' \"$0\" sync-simulator \"$1\" --edit-rate 50 --evict-rate 50 --seconds 1", [vault])
        #expect(result.status == 0, "\(result.error)")
        #expect(Date().timeIntervalSince(started) < 10, "it hung")
        let peak = result.error.split(separator: "\n").first { $0.hasPrefix("peak ") }.flatMap { Int($0.dropFirst(5)) } ?? Int.max
        #expect(peak < 160_000, "peak resident memory \(peak) KiB: a planted file was read whole")
        #expect(outside.lines("secret") == ["secret", ""])
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside.path) == ["secret"])
        #expect(scratch.lines("n.md").first == "mine", "the evicted note did not come back")
        #expect(!FileManager.default.fileExists(atPath: vault + "/fifo.md") && !FileManager.default.fileExists(atPath: vault + "/link.md"))
        #expect(!FileManager.default.fileExists(atPath: vault + "/liar.md") && !FileManager.default.fileExists(atPath: vault + "/someone-else.md"))
        var status = stat()
        #expect(lstat(vault + "/big.md", &status) == 0 && status.st_size == 1 << 30, "the huge copy was not brought back by renaming it")
        for planted in ["fifo.md", "link.md", "liar.md"] { #expect(result.error.contains(planted), "not reported: \(planted): \(result.error)") }
        // Writers never create a note beside anything at its stub's name.
        #expect(try shell("\"$0\" append --timeout 1 \"$1\" x", [vault + "/folder.md"]).status == 75)
        #expect(try shell("\"$0\" append --timeout 1 \"$1\" x", [vault + "/fifo.md"]).status == 75)
        #expect(!FileManager.default.fileExists(atPath: vault + "/folder.md"))
    }

    @Test func anAppHoldingTheFolderLockStallsNeitherTheSimulatorNorWritersOfNotesThatExist() throws {
        let scratch = Scratch()
        try "note\n".write(toFile: scratch.path + "/n.md", atomically: false, encoding: .utf8)
        let holder = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(4)"
        let (app, out) = try Party.run(["/usr/bin/python3", "-c", holder, scratch.path], wait: false)
        #expect(String(decoding: out.fileHandleForReading.availableData, as: UTF8.self).hasPrefix("held"))
        let started = Date()
        let simulator = try shell("\"$0\" sync-simulator \"$1\" --edit-rate 100 --evict-rate 1000 --seconds 1", [scratch.path])
        #expect(simulator.status == 0)
        #expect(Date().timeIntervalSince(started) < 3, "the simulator waited for the app's folder lock")
        #expect(simulator.output.contains("evictions 0,"), "evicted without the folder lock: \(simulator.output)")
        #expect(try shell("\"$0\" append --timeout 0.5 \"$1\" fine", [scratch.path + "/n.md"]).status == 0)
        #expect(try shell("\"$0\" append --timeout 0.5 \"$1\" new", [scratch.path + "/new.md"]).status == 75)  // creating needs the folder lock
        app.waitUntilExit()
        #expect(try shell("\"$0\" append --timeout 0.5 \"$1\" new", [scratch.path + "/new.md"]).status == 0)
    }
}
