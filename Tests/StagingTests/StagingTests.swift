import Foundation
import Synchronization
import Testing
@testable import Staging
import Coordination
import Grants
import Sandbox
import SystemKit
import SystemPackage

@Suite("Staged grants: the clone, the change list, accept and reject")
struct StagingTests {
    /// A vault with a bit of everything.
    static func fill(_ home: StagingHome) {
        #expect(StagingHome.shell("""
            printf 'one\\n' > a.txt; printf 'two\\n' > b.txt; mkdir d e; printf x > d/x; printf y > d/y; printf z > e/z
            ln -s a.txt link; chmod 640 b.txt
            """, in: home.vault) == 0)
    }

    @Test func theCloneIsTheFolderAndTheFolderIsUntouched() throws {
        let home = StagingHome()
        Self.fill(home)
        let before = home.snapshot()
        let area = try home.area()
        _ = try area.prepare(host: try home.vaultDescriptor(), as: home.staged)
        #expect(home.snapshot(home.clonePath) == before)
        #expect(try area.changes(host: home.vaultDescriptor()).changes.isEmpty)
        #expect(home.snapshot() == before)
    }

    @Test func everyKindOfChangeIsListedByWhatHappened() throws {
        let home = StagingHome()
        Self.fill(home)
        let area = try home.area()
        _ = try area.prepare(host: try home.vaultDescriptor(), as: home.staged)
        let before = home.snapshot()
        // Deleting b.txt and making new.txt at once: ext4 hands b.txt's inode number
        // straight to new.txt, which must still read as a deletion and an addition.
        #expect(StagingHome.shell("""
            printf 'more\\n' >> a.txt; rm b.txt; printf new > new.txt; mv d d2; rm -r e; mkdir e; chmod 600 d2/x
            ln -sf new.txt link
            """, in: home.clonePath) == 0)
        let changes = try area.changes(host: home.vaultDescriptor()).changes
        #expect(Set(changes.map(\.summary)) == [
            "modified a.txt", "deleted b.txt", "added new.txt", "renamed d -> d2", "renamed d/x -> d2/x", "renamed d/y -> d2/y",
            "deleted e/z", "modified link",
        ])
        #expect(changes.first { $0.summary == "renamed d/x -> d2/x" }?.newMode == 0o600)
        #expect(changes.allSatisfy { !$0.changedOutside })
        #expect(home.snapshot() == before, "the folder itself is untouched until accepted")
    }

    /// Editors save by writing a new file and renaming it over the old one:
    /// a new inode at the same path is a modification, and the same bytes none.
    @Test func aFileSavedByRenameIsModifiedNotDeletedAndAdded() throws {
        let home = StagingHome()
        Self.fill(home)
        let area = try home.area()
        _ = try area.prepare(host: try home.vaultDescriptor(), as: home.staged)
        #expect(StagingHome.shell("printf 'one\\nsaved\\n' > .a.swp && mv .a.swp a.txt; cp -p b.txt .b && mv .b b.txt", in: home.clonePath) == 0)
        #expect(try area.changes(host: home.vaultDescriptor()).changes.map(\.summary) == ["modified a.txt"])
    }

    @Test func acceptingAllMakesTheFolderTheCloneAndEndsTheStaging() throws {
        let home = StagingHome()
        Self.fill(home)
        let area = try home.area()
        _ = try area.prepare(host: try home.vaultDescriptor(), as: home.staged)
        #expect(StagingHome.shell("""
            printf 'more\\n' >> a.txt; rm b.txt; printf new > new.txt; mv d d2; rm -r e; mkdir e; printf w > e/w; chmod 600 d2/x; ln -s new.txt l2; ln -sf e/w link
            """, in: home.clonePath) == 0)
        let wanted = home.snapshot(home.clonePath)
        let outcomes = try area.accept(host: try home.vaultDescriptor(), hostPath: FilePath(home.vault), savingComputer: "test")
        #expect(outcomes.allSatisfy { $0.result == .applied }, "\(outcomes.filter { $0.result != .applied })")
        #expect(home.snapshot() == wanted)
        #expect(!area.hasClone, "nothing is left staged")
    }

    @Test func aFileChangedOutsideIsNeverOverwrittenAndTheStagedBytesAreAConflictVersion() throws {
        let home = StagingHome()
        Self.fill(home)
        let area = try home.area()
        _ = try area.prepare(host: try home.vaultDescriptor(), as: home.staged)
        #expect(StagingHome.shell("printf 'from the app\\n' >> a.txt; rm b.txt", in: home.clonePath) == 0)
        // The sync daemon (or the person) changes both meanwhile.
        #expect(StagingHome.shell("printf 'from the daemon\\n' >> a.txt; printf 'kept\\n' >> b.txt", in: home.vault) == 0)
        let changes = try area.changes(host: home.vaultDescriptor()).changes
        #expect(changes.allSatisfy { $0.changedOutside })
        let outcomes = try area.accept(host: try home.vaultDescriptor(), hostPath: FilePath(home.vault), savingComputer: "test")
        #expect(try String(contentsOfFile: home.vault + "/a.txt", encoding: .utf8) == "one\nfrom the daemon\n")
        #expect(try String(contentsOfFile: home.vault + "/b.txt", encoding: .utf8) == "two\nkept\n")
        let versions = try FileVersion.unresolvedConflictVersions(of: FilePath(home.vault + "/a.txt"))
        #expect(versions.count == 1)
        #expect(try versions.first?.contents() == Array("one\nfrom the app\n".utf8))
        guard case .conflict = outcomes.first(where: { $0.change.summary == "modified a.txt" })?.result else {
            Issue.record("a.txt: \(outcomes)")
            return
        }
        guard case .keptHost = outcomes.first(where: { $0.change.summary == "deleted b.txt" })?.result else {
            Issue.record("b.txt: \(outcomes)")
            return
        }
        #expect(!area.hasClone)
    }

    /// A file the sync daemon evicted meanwhile is downloaded before it is
    /// written (the coordinator would refuse a placeholder's name); the
    /// eviction and download moved its ctime, so the staged bytes are kept
    /// beside it as a conflict version: nothing is lost.
    @Test func anEvictedFileIsDownloadedFirstAndNothingIsLost() throws {
        let home = StagingHome()
        Self.fill(home)
        let area = try home.area()
        _ = try area.prepare(host: try home.vaultDescriptor(), as: home.staged)
        #expect(StagingHome.shell("printf 'staged\\n' >> a.txt", in: home.clonePath) == 0)
        var evicting = SyncSimulator.Options()
        (evicting.editRate, evicting.evictRate, evicting.restoreOnStop) = (0, 400, false)
        let deadline = ContinuousClock.now + .seconds(20)
        _ = try SyncSimulator(folder: FilePath(home.vault), options: evicting).run {
            FileManager.default.fileExists(atPath: home.vault + "/.a.txt.icloud") || ContinuousClock.now > deadline
        }
        try #require(!FileManager.default.fileExists(atPath: home.vault + "/a.txt"), "a.txt was evicted")
        // The daemon answers download requests while the accept runs.
        let stop = Arc(Mutex(false))
        var options = SyncSimulator.Options()
        (options.editRate, options.evictRate) = (0, 0)
        let serving = options, vault = home.vault
        let daemon = Thread { _ = try? SyncSimulator(folder: FilePath(vault), options: serving).run { stop.value.withLock { $0 } } }
        daemon.start()
        defer { stop.value.withLock { $0 = true } }
        let outcomes = try area.accept([Array("a.txt".utf8)], host: try home.vaultDescriptor(), hostPath: FilePath(home.vault), savingComputer: "t")
        guard case .conflict = outcomes.first?.result else {
            Issue.record("\(outcomes)")
            return
        }
        #expect(try String(contentsOfFile: home.vault + "/a.txt", encoding: .utf8) == "one\n")
        let versions = try FileVersion.unresolvedConflictVersions(of: FilePath(home.vault + "/a.txt"))
        #expect(try versions.map { try $0.contents() } == [Array("one\nstaged\n".utf8)])
    }

    /// Files are applied in batches (written ahead, flushed once, put in
    /// place one by one under their locks): every file of several batches
    /// lands, and those changed outside meanwhile are conflicts, whichever batch.
    @Test func manyFilesLandInBatchesAndChangesOutsideStayConflicts() throws {
        let home = StagingHome()
        #expect(StagingHome.shell("for i in $(seq 1 300); do printf 'n%s\\n' $i > f$i; done", in: home.vault) == 0)
        let area = try home.area()
        _ = try area.prepare(host: try home.vaultDescriptor(), as: home.staged)
        #expect(StagingHome.shell("for i in $(seq 1 300); do printf 'app\\n' >> f$i; done", in: home.clonePath) == 0)
        #expect(StagingHome.shell("printf 'daemon\\n' >> f7; printf 'daemon\\n' >> f150; printf 'daemon\\n' >> f299", in: home.vault) == 0)
        let outcomes = try area.accept(host: try home.vaultDescriptor(), hostPath: FilePath(home.vault), savingComputer: "t")
        let conflicts = outcomes.filter { if case .conflict = $0.result { return true } else { return false } }.map(\.change.summary)
        #expect(Set(conflicts) == ["modified f7", "modified f150", "modified f299"])
        #expect(outcomes.filter { $0.result == .applied }.count == 297)
        for i in 1...300 {
            let outside = [7, 150, 299].contains(i)
            #expect(try String(contentsOfFile: home.vault + "/f\(i)", encoding: .utf8) == "n\(i)\n" + (outside ? "daemon\n" : "app\n"))
        }
        #expect(!area.hasClone)
    }

    @Test func rejectingOnePathRestoresItAndKeepsTheRest() throws {
        let home = StagingHome()
        Self.fill(home)
        let area = try home.area()
        _ = try area.prepare(host: try home.vaultDescriptor(), as: home.staged)
        #expect(StagingHome.shell("printf 'x\\n' >> a.txt; rm -r d; printf n > n.txt", in: home.clonePath) == 0)
        let before = home.snapshot()
        let rejected = try area.reject([Array("d".utf8)], host: try home.vaultDescriptor())
        #expect(Set(rejected.map(\.change.summary)) == ["deleted d", "deleted d/x", "deleted d/y"])
        #expect(Set(try area.changes(host: home.vaultDescriptor()).changes.map(\.summary)) == ["modified a.txt", "added n.txt"])
        #expect(home.snapshot(home.clonePath)["d/x"] == "file 644 x")
        let accepted = try area.accept([Array("n.txt".utf8)], host: try home.vaultDescriptor(), hostPath: FilePath(home.vault), savingComputer: "t")
        #expect(accepted.map(\.result) == [.applied])
        #expect(Set(try area.changes(host: home.vaultDescriptor()).changes.map(\.summary)) == ["modified a.txt"])
        var after = before
        after["n.txt"] = "file 644 n"
        #expect(home.snapshot() == after)
        #expect(throws: StagingError.self) { try area.accept([Array("nothing-here".utf8)], host: try home.vaultDescriptor(), hostPath: FilePath(home.vault), savingComputer: "t") }
        _ = try area.reject(host: try home.vaultDescriptor())
        #expect(!area.hasClone)
        #expect(home.snapshot() == after)
    }

    @Test func aHostileTreeAppliesNoDeviceNoLinkOutNoSetIDAndNamesAreBytes() throws {
        let home = StagingHome()
        Self.fill(home)
        let area = try home.area()
        _ = try area.prepare(host: try home.vaultDescriptor(), as: home.staged)
        #expect(StagingHome.shell("""
            mkfifo fifo; ln -s /etc/passwd out; ln -s ../../x d/out2; ln -s e/z inside; printf s > suid; chmod 4755 suid
            printf b > "$(printf 'bad\\nname\\033[31m\\377')"
            mknod whiteout c 0 0; mkdir opaque; printf o > opaque/kept
            python3 -c 'import os; os.setxattr("opaque", "trusted.overlay.opaque", b"y"); os.setxattr("opaque", "user.overlay.opaque", b"y")'
            truncate -s 100G sparse
            """, in: home.clonePath) == 0)
        let outcomes = try area.accept(host: try home.vaultDescriptor(), hostPath: FilePath(home.vault), savingComputer: "t")
        func result(_ path: String) -> ReviewOutcome.Result? { outcomes.first { $0.change.path == Array(path.utf8) }?.result }
        guard case .refused = result("fifo"), case .refused = result("out"), case .refused = result("d/out2"),
              case .refused = result("whiteout") else {
            Issue.record("\(outcomes)")
            return
        }
        #expect(result("inside") == .applied)
        #expect(result("suid") == .applied)
        var status = stat()
        #expect(lstat(home.vault + "/suid", &status) == 0)
        #expect(status.st_mode & 0o7777 == 0o755, "set-id bits are never applied")
        #expect(lstat(home.vault + "/fifo", &status) != 0)
        #expect(lstat(home.vault + "/whiteout", &status) != 0, "an overlay whiteout is a device: never made")
        #expect(result("opaque/kept") == .applied, "an opaque marker means nothing: the folder is an ordinary one")
        // A 100 GB file that costs its writer nothing costs the folder nothing either.
        #expect(lstat(home.vault + "/sparse", &status) == 0)
        #expect(status.st_size == 100 << 30 && status.st_blocks < 64, "size \(status.st_size), blocks \(status.st_blocks)")
        #expect(lstat(home.vault + "/out", &status) != 0)
        let odd = home.vault + "/bad\nname\u{1B}[31m"
        let oddBytes = Array(odd.utf8) + [0xFF]
        #expect(oddBytes.withCString { lstat($0, &status) } == 0, "a non-UTF-8 name is applied as its bytes")
    }

    @Test func aTreeTooDeepToWalkIsAClearErrorAndCanBeRejected() throws {
        let home = StagingHome()
        let area = try home.area()
        _ = try area.prepare(host: try home.vaultDescriptor(), as: home.staged)
        // 10,000 levels: a walk would need a descriptor a level; the remover needs two.
        #expect(StagingHome.shell("python3 -c 'import os\nfor _ in range(10000): os.mkdir(\"d\"); os.chdir(\"d\")'", in: home.clonePath) == 0)
        #expect {
            try area.changes(host: home.vaultDescriptor())
        } throws: { error in
            guard case .tooDeep(_, let limit) = error as? StagingError else { return false }
            return limit == TreeWalk.depthLimit
        }
        _ = try area.reject(host: try home.vaultDescriptor())
        #expect(!area.hasClone)
        #expect(!FileManager.default.fileExists(atPath: home.clonePath))
    }

    @Test func twoHoldersNeverShareAnArea() throws {
        let home = StagingHome()
        var first: StagingArea? = try home.area()
        #expect(first != nil)
        #expect {
            _ = try StagingArea.open(state: home.state(), app: home.app, grant: home.grant, create: true)
        } throws: { error in
            if case .busy = error as? StagingError { return true }
            return false
        }
        first = nil
        #expect(try StagingArea.open(state: home.state(), app: home.app, grant: home.grant, create: true) != nil, "free again once the first is gone")
    }

    @Test func aDamagedManifestAppliesNothing() throws {
        let home = StagingHome()
        Self.fill(home)
        let area = try home.area()
        _ = try area.prepare(host: try home.vaultDescriptor(), as: home.staged)
        #expect(StagingHome.shell("printf gone > a.txt", in: home.clonePath) == 0)
        let manifest = home.statePath + "/staging/\(home.app.rawValue)/\(home.grant.hex)/current/manifest"
        var text = try String(contentsOfFile: manifest, encoding: .utf8)
        text = text.replacingOccurrences(of: " 1\n", with: " 1x\n")
        try text.write(toFile: manifest, atomically: false, encoding: .utf8)
        let before = home.snapshot()
        #expect {
            try area.accept(host: try home.vaultDescriptor(), hostPath: FilePath(home.vault), savingComputer: "t")
        } throws: { error in
            if case .damaged = error as? StagingError { return true }
            return false
        }
        #expect(home.snapshot() == before)
    }
}

@Suite("The review policy key")
struct ReviewPolicyKeyTests {
    @Test func theKeyIsABoolInEveryFormAndNothingElse() throws {
        for flag in [true, false] {
            let xml = """
                <?xml version="1.0" encoding="UTF-8"?><plist version="1.0"><dict><key>org.sandboxed-run.files.review</key><\(flag)/></dict></plist>
                """
            #expect(try Policy(data: Array(xml.utf8), source: "x").reviewChanges == flag)
            #expect(try Policy(data: Array("{\"org.sandboxed-run.files.review\": \(flag)}".utf8), source: "j").reviewChanges == flag)
        }
        #expect(try Policy(data: Array("{}".utf8), source: "j").reviewChanges == false)
        #expect(throws: (any Error).self) { try Policy(data: Array("{\"org.sandboxed-run.files.review\": 1}".utf8), source: "j") }
        #expect(throws: (any Error).self) { try Policy(data: Array("{\"org.sandboxed-run.files.reveiw\": true}".utf8), source: "j") }
        for name in Policy.builtinNames {
            #expect(Policy.builtin(named: name)?.reviewChanges == false, "\(name): no shipped policy stages by itself")
        }
    }
}

/// A value shared with a thread.
final class Arc<Value: ~Copyable & Sendable>: Sendable {
    let value: Value
    init(_ value: consuming Value) { self.value = value }
}
