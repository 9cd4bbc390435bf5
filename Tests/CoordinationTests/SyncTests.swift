import Foundation
import SystemPackage
import Testing
@testable import Coordination

@Suite struct PlaceholderTests {
    @Test func stubsRoundTripThroughTheBoundedReader() throws {
        for name in ["daily.md", "Überblick – 2026.md", String(repeating: "n", count: 200)] {
            let bytes = Placeholder.encode(.init(name: FilePath(name), size: 12345))
            #expect(bytes.starts(with: Array("bplist00".utf8)))
            #expect(try Placeholder.decode(bytes, path: "x") == .init(name: FilePath(name), size: 12345))
        }
    }

    @Test func hostileStubsAreTypedErrors() throws {
        let valid = Placeholder.encode(.init(name: "a.md", size: 1))
        var deep = Array("bplist00".utf8)
        deep += [UInt8](repeating: 0xA1, count: 5000)
        let cases: [[UInt8]] = [[], Array(valid.prefix(20)), Array("bplist00".utf8) + [0xff], deep,
                                Array("<plist><dict><key>NSURLNameKey</key><integer>1</integer></dict></plist>".utf8),
                                Placeholder.encode(.init(name: "../../etc/passwd", size: 1)),
                                [UInt8](repeating: 0x41, count: 2 << 20)]
        for bytes in cases {
            #expect(throws: CoordinationError.damagedPlaceholder("stub")) { try Placeholder.decode(bytes, path: "stub") }
        }
    }

    @Test func statusAndDownloadRequestRoundTrip() throws {
        let scratch = Scratch()
        let file = FilePath(scratch.path + "/note.md")
        try "hello\n".write(toFile: file.string, atomically: false, encoding: .utf8)
        #expect(try Placeholder.status(of: file) == .current)
        // Evicted, as the daemon does it.
        let stub = Placeholder.encode(.init(name: "note.md", size: 6))
        try Data(stub).write(to: URL(fileURLWithPath: scratch.path + "/.note.md.icloud"))
        try FileManager.default.moveItem(atPath: file.string, toPath: scratch.path + "/.note.md.icloud.data")
        #expect(try Placeholder.status(of: file) == .notDownloaded)
        #expect(throws: CoordinationError.placeholder(file)) { try FileCoordinator().append(line: Array("x".utf8), to: file) }
        // ... a writer asks for it; the daemon brings it back; the line lands.
        let root = scratch.path
        let daemon = Thread {
            let simulator = SyncSimulator(folder: FilePath(root), options: { var o = SyncSimulator.Options(); o.editRate = 0; return o }())
            let end = Date().addingTimeInterval(3)
            _ = try? simulator.run { Date() > end || (try? Placeholder.status(of: file)) == .current && FileManager.default.fileExists(atPath: file.string + ".done") }
        }
        daemon.start()
        try Placeholder.download(file, timeout: .seconds(3))
        try FileCoordinator().append(line: Array("after download".utf8), to: file)
        _ = FileManager.default.createFile(atPath: file.string + ".done", contents: nil)
        #expect(scratch.lines("note.md") == ["hello", "after download", ""])
        // The daemon removes the stub and the request just after the file is back.
        for _ in 0..<300 where FileManager.default.fileExists(atPath: scratch.path + "/.note.md.icloud.download") {
            Thread.sleep(forTimeInterval: 0.01)
        }
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/.note.md.icloud"))
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/.note.md.icloud.download"))
    }
}

@Suite struct FileVersionTests {
    @Test func conflictVersionsAreListedReadAndResolvedLastWriterWins() throws {
        let scratch = Scratch()
        let file = FilePath(scratch.path + "/note.md")
        try "current\n".write(toFile: file.string, atomically: false, encoding: .utf8)
        let older = try FileVersion.add(to: file, contents: Array("older\n".utf8), modified: timespec(tv_sec: 1000, tv_nsec: 5), savingComputer: "laptop")
        let newer = try FileVersion.add(to: file, contents: Array("newer\n".utf8), modified: timespec(tv_sec: 4_000_000_000, tv_nsec: 0), savingComputer: "phone")
        #expect(try FileVersion.unresolvedConflictVersions(of: file) == [older, newer])
        #expect(try newer.contents() == Array("newer\n".utf8))
        #expect(try FileVersion.resolve(file) == .version(newer.identifier))  // newer than the file's mtime
        #expect(scratch.lines("note.md") == ["newer", ""])
        #expect(try FileVersion.unresolvedConflictVersions(of: file).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/.sandboxed-run-versions"))
    }

    /// A daemon killed while keeping a conflict version leaves `.sr-<hex>` in the
    /// item's versions folder; a clean stop removes it (under the item's lock)
    /// and leaves the file and its real versions as they were.
    @Test func aCleanStopSweepsTemporariesAKilledDaemonLeftAmongVersions() throws {
        let scratch = Scratch()
        let file = FilePath(scratch.path + "/note.md")
        try "current\n".write(toFile: file.string, atomically: false, encoding: .utf8)
        let kept = try FileVersion.add(to: file, contents: Array("kept\n".utf8), modified: timespec(tv_sec: 10, tv_nsec: 0), savingComputer: "x")
        let versions = scratch.path + "/.sandboxed-run-versions/note.md"
        let temporary = versions + "/.sr-0123456789abcdef"
        #expect(FileManager.default.createFile(atPath: temporary, contents: Data("half a version".utf8)))
        var options = SyncSimulator.Options()
        (options.editRate, options.conflictRate, options.evictRate) = (0, 0, 0)
        _ = try SyncSimulator(folder: FilePath(scratch.path), options: options).run { true }
        #expect(!FileManager.default.fileExists(atPath: temporary))
        #expect(scratch.lines("note.md") == ["current", ""])
        #expect(try FileVersion.unresolvedConflictVersions(of: file) == [kept])
        #expect(try kept.contents() == Array("kept\n".utf8))
    }

    /// A writer killed between creating its staged journal (`STEM.sr-journal.new`)
    /// and renaming it into place leaves it beside the item; the record was never
    /// written. Readers recover only a journal in place, so an item no writer
    /// touches again kept it through a clean stop (the stress test's leftover,
    /// 1 run in 25). A clean stop recovers every item's journal under its write
    /// lock: the staged journal goes, the file stays as it was.
    @Test func aCleanStopRemovesTheStagedJournalOfAKilledWriter() throws {
        let scratch = Scratch()
        let long = String(repeating: "n", count: 237) + ".md"
        for name in ["note.md", long] {
            try "# note\n".write(toFile: scratch.path + "/" + name, atomically: false, encoding: .utf8)
            let stem = String(decoding: ItemNames.stem(of: Array(name.utf8)), as: UTF8.self)
            // What a killed writer leaves: its magic line and half the record's description.
            let staged = scratch.path + "/" + stem + ".sr-journal.new"
            #expect(FileManager.default.createFile(atPath: staged, contents: Data("sandboxed-run journal 2\n7 50".utf8),
                                                   attributes: [.posixPermissions: 0o600]))
        }
        var options = SyncSimulator.Options()
        (options.editRate, options.conflictRate, options.evictRate) = (0, 0, 0)
        let counts = try SyncSimulator(folder: FilePath(scratch.path), options: options).run { true }
        #expect(counts.refused == 0)
        let left = try FileManager.default.contentsOfDirectory(atPath: scratch.path).filter { $0.hasPrefix(".") }
        #expect(left.isEmpty, "a clean stop left \(left)")
        #expect(scratch.lines("note.md") == ["# note", ""])
        #expect(scratch.lines(long) == ["# note", ""])
    }

    @Test func keepingTheCurrentFileOrANamedVersion() throws {
        let scratch = Scratch()
        let file = FilePath(scratch.path + "/note.md")
        try "current\n".write(toFile: file.string, atomically: false, encoding: .utf8)
        let old = try FileVersion.add(to: file, contents: Array("old\n".utf8), modified: timespec(tv_sec: 10, tv_nsec: 0), savingComputer: "x")
        #expect(try FileVersion.resolve(file, keeping: .newest) == .current)
        #expect(scratch.lines("note.md") == ["current", ""])
        try FileVersion.add(to: file, contents: Array("old\n".utf8), modified: timespec(tv_sec: 10, tv_nsec: 0), savingComputer: "x")
        #expect(throws: CoordinationError.noSuchVersion(file, "nope")) { try FileVersion.resolve(file, keeping: .version("nope")) }
        try FileVersion.resolve(file, keeping: .version(old.identifier))
        #expect(scratch.lines("note.md") == ["old", ""])
    }

    @Test func hostileEntriesInTheVersionsFolderAreSkipped() throws {
        let scratch = Scratch()
        let file = FilePath(scratch.path + "/note.md")
        try "current\n".write(toFile: file.string, atomically: false, encoding: .utf8)
        let versions = scratch.path + "/.sandboxed-run-versions/note.md"
        try FileManager.default.createDirectory(atPath: versions, withIntermediateDirectories: true)
        #expect(symlink("/etc/passwd", versions + "/1.000000000-link") == 0)
        #expect(mkfifo(versions + "/2.000000000-fifo", 0o600) == 0)
        _ = FileManager.default.createFile(atPath: versions + "/not-a-version", contents: Data("x".utf8))
        #expect(try FileVersion.unresolvedConflictVersions(of: file).isEmpty)
    }
}

@Suite struct SyncSimulatorTests {
    @Test func itStopsCleanlyOnSIGTERMAndLeavesNothingBehind() throws {
        let scratch = Scratch()
        for i in 0..<5 { try "note \(i)\n".write(toFile: scratch.path + "/n\(i).md", atomically: false, encoding: .utf8) }
        let (simulator, out) = try Party.run([Party.binary, "sync-simulator", scratch.path, "--edit-rate", "200", "--evict-rate", "50"], wait: false)
        Thread.sleep(forTimeInterval: 1)
        kill(simulator.processIdentifier, SIGTERM)
        simulator.waitUntilExit()
        #expect(simulator.terminationStatus == 0)
        #expect(try String(decoding: out.fileHandleForReading.readAll(), as: UTF8.self).hasPrefix("uploads "))
        let left = try FileManager.default.contentsOfDirectory(atPath: scratch.path).sorted()
        #expect(left == (0..<5).map { "n\($0).md" }, "temporary files or placeholders left: \(left)")
        for i in 0..<5 { #expect(scratch.lines("n\(i).md").first == "note \(i)") }
    }

    @Test func hostileEntriesAreNeverFollowedOrOpened() throws {
        let scratch = Scratch()
        let outside = Scratch()
        try "outside\n".write(toFile: outside.path + "/secret.md", atomically: false, encoding: .utf8)
        #expect(symlink(outside.path + "/secret.md", scratch.path + "/link.md") == 0)
        #expect(symlink(outside.path, scratch.path + "/linked-folder") == 0)
        #expect(mkfifo(scratch.path + "/fifo.md", 0o600) == 0)
        _ = FileManager.default.createFile(atPath: scratch.path + "/.evil.md.icloud", contents: Data("not a plist".utf8))
        #expect(symlink(outside.path + "/secret.md", scratch.path + "/.evil.md.icloud.data") == 0)
        _ = FileManager.default.createFile(atPath: scratch.path + "/.evil.md.icloud.download", contents: nil)
        let started = Date()
        let (simulator, _) = try Party.run([Party.binary, "sync-simulator", scratch.path, "--seconds", "1", "--edit-rate", "500", "--evict-rate", "200", "--conflict-rate", "50"])
        #expect(simulator.terminationStatus == 0)
        #expect(Date().timeIntervalSince(started) < 10, "it hung")
        #expect(outside.lines("secret.md") == ["outside", ""])
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside.path) == ["secret.md"])
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/evil.md"))
    }

    @Test func sparseFilesCannotDriveItsMemoryUp() throws {
        // 24 sparse files of 15 MiB cost the app no disk; uploading them all used to keep 360 MiB.
        let scratch = Scratch()
        for i in 0..<24 {
            _ = FileManager.default.createFile(atPath: scratch.path + "/big\(i).md", contents: nil)
            #expect(truncate(scratch.path + "/big\(i).md", 15 << 20) == 0)
        }
        _ = FileManager.default.createFile(atPath: scratch.path + "/huge.md", contents: nil)
        #expect(truncate(scratch.path + "/huge.md", 60 << 20) == 0)  // over the simulator's 16 MiB: skipped
        let (time, out) = try Party.run(["/usr/bin/time", "-f", "peak %M", Party.binary, "sync-simulator", scratch.path, "--seconds", "1.5", "--edit-rate", "0"], wait: false, standardError: true)
        time.waitUntilExit()
        let output = try String(decoding: out.fileHandleForReading.readAll(), as: UTF8.self)
        let peak = output.split(separator: "\n").first { $0.hasPrefix("peak ") }.flatMap { Int($0.dropFirst(5)) } ?? Int.max
        #expect(time.terminationStatus == 0, "\(output)")
        #expect(output.contains("uploads 24"), "\(output)")
        #expect(peak < 160_000, "peak resident memory \(peak) KiB")
    }

    @Test func thousandsOfFoldersCannotUseUpItsDescriptors() throws {
        let scratch = Scratch()
        try "hello\n".write(toFile: scratch.path + "/note.md", atomically: false, encoding: .utf8)
        for i in 0..<1100 {
            try FileManager.default.createDirectory(atPath: scratch.path + "/d\(i)", withIntermediateDirectories: false)
            try "x\n".write(toFile: scratch.path + "/d\(i)/f.md", atomically: false, encoding: .utf8)
        }
        let (simulator, out) = try Party.run(["/bin/sh", "-c", "ulimit -n 1024 && exec \"$0\" sync-simulator \"$1\" --seconds 1.5 --edit-rate 20", Party.binary, scratch.path])
        let counts = try String(decoding: out.fileHandleForReading.readAll(), as: UTF8.self)
        #expect(simulator.terminationStatus == 0)
        #expect(counts.contains("skipped 0"), "\(counts)")
        #expect(!counts.hasPrefix("uploads 0,"), "\(counts)")
    }

    @Test func theSameSeedMakesTheSameRun() throws {
        func run() throws -> String {
            let scratch = Scratch()
            for i in 0..<4 { try "n\(i)\n".write(toFile: scratch.path + "/n\(i).md", atomically: false, encoding: .utf8) }
            let simulator = SyncSimulator(folder: FilePath(scratch.path), options: { var o = SyncSimulator.Options(); o.seed = 42; o.editRate = 100; return o }())
            var ticks = 0
            _ = try simulator.run(tick: .milliseconds(1)) { ticks += 1; return ticks > 200 }
            return (0..<4).map { scratch.lines("n\($0).md").joined(separator: "|") }.joined(separator: ";")
        }
        #expect(try run() == run())
    }
}
