import Foundation
import Testing
@testable import Grants
import Sandbox

/// The launch cache (`LedgerCache`) answers for the ledger only when it
/// provably says what the ledger says now: a revoke, in this process or
/// another, a microsecond before a launch is never missed; a pending grant
/// is never cached; a cache that was altered, replayed, planted or made
/// stale by a writer that does not know of it is refused; a ledger damaged
/// or made newer behind the cache is still an error.
@Suite struct LedgerCacheTests {
    static let isRoot = getuid() == 0

    /// A grant of a new folder `name`, made by a broker that is gone when
    /// this returns (closing its connection merges and deletes the -wal, as
    /// a `pick` process does when it exits).
    func grant(_ home: Home, _ name: String, access: GrantAccess = .readWrite) throws -> GrantBroker.Issued {
        try home.broker().grant(app: memo, folder: try home.folder(name), access: access)
    }

    /// Resolves as a launch does: a broker of its own, opened for this one
    /// bookmark. Returns the status and whether the ledger was read.
    func launch(_ home: Home, _ bookmark: [UInt8]) throws -> (status: BookmarkStatus, readLedger: Bool) {
        let broker = try home.broker()
        let status = try broker.resolve(bookmark, app: memo).status
        return (status, broker.ledgerLookups > 0)
    }

    var cachePath: (Home) -> String { { $0.statePath + "/" + LedgerCache.fileName } }

    @Test func aSecondLaunchReadsNoLedgerAndAFirstOneDoes() throws {
        let home = Home()
        let issued = try grant(home, "vault")
        #expect(try launch(home, issued.bookmark) == (.fresh, true))
        #expect(FileManager.default.fileExists(atPath: cachePath(home)))
        #expect(try launch(home, issued.bookmark) == (.fresh, false))
        #expect(try launch(home, issued.bookmark) == (.fresh, false))
        // Another grant joins the cache: both are then answered without the ledger.
        let other = try grant(home, "other")
        #expect(try launch(home, other.bookmark) == (.fresh, true))
        #expect(try launch(home, issued.bookmark) == (.fresh, true), "the grant changed the ledger: the cache was removed")
        #expect(try launch(home, other.bookmark) == (.fresh, false))
        #expect(try launch(home, issued.bookmark) == (.fresh, false))
    }

    @Test func aRevokeBetweenTwoLaunchesIsSeenEveryTime() throws {
        // In a tight loop, by grant, by app and by folder; each revoke by a
        // broker of its own, as `grants revoke` is.
        let home = Home()
        for round in 0..<60 {
            let issued = try grant(home, "vault-\(round)")
            let other = try grant(home, "other-\(round)")
            _ = try launch(home, issued.bookmark)
            _ = try launch(home, other.bookmark)
            #expect(try launch(home, issued.bookmark) == (.fresh, false), "round \(round): the cache was in use")
            let revoker = try home.broker()
            switch round % 3 {
            case 0: #expect(try revoker.revoke(grant: issued.id.hex) == 1)
            case 1: #expect(try revoker.revoke(folder: home.path + "/user/vault-\(round)") == 1)
            default: #expect(try revoker.revoke(app: memo) >= 1)
            }
            #expect(try launch(home, issued.bookmark).status == .revoked, "round \(round)")
            #expect(try launch(home, issued.bookmark).status == .revoked, "round \(round), again")
            #expect(try launch(home, other.bookmark).status == (round % 3 == 2 ? .revoked : .fresh), "round \(round)")
        }
    }

    @Test func aBrokerThatStaysOpenSeesARevokeMadeElsewhere() throws {
        // A long-lived program resolving again and again, while `grants revoke` runs.
        let home = Home()
        let issued = try grant(home, "vault")
        let program = try home.broker()
        #expect(try program.resolve(issued.bookmark, app: memo).status == .fresh)
        #expect(try program.resolve(issued.bookmark, app: memo).status == .fresh)
        #expect(try home.broker().revoke(grant: issued.id.hex) == 1)
        #expect(try program.resolve(issued.bookmark, app: memo).status == .revoked)
    }

    @Test func aPendingGrantIsNeverCachedAndGivesNothing() throws {
        let home = Home()
        var during: (BookmarkStatus, Bool)?
        let issued = try home.broker().grant(app: memo, folder: try home.folder("vault"), access: .readWrite) { bookmark in
            _ = try launch(home, bookmark)
            during = try launch(home, bookmark)
        }
        #expect(during.map { $0 == (.invalid, true) } == true, "\(String(describing: during))")
        #expect(try launch(home, issued.bookmark) == (.fresh, true))
        #expect(try launch(home, issued.bookmark) == (.fresh, false))
    }

    // MARK: Other processes

    @Test(.enabled(if: CLI.available, "needs the sandboxed-run binary built beside the tests"))
    func aRevokeInAnotherProcessIsSeenByTheNextLaunchHereAndThere() throws {
        let home = Home()
        for round in 0..<12 {
            let issued = try grant(home, "vault-\(round)")
            let file = home.path + "/vault-\(round).bookmark"
            try Data(issued.bookmark).write(to: URL(fileURLWithPath: file))
            // Launches in other processes fill the cache and use it.
            #expect(CLI.run(["resolve", "--app", memo.rawValue, file], home: home) == 0)
            #expect(CLI.run(["resolve", "--app", memo.rawValue, file], home: home) == 0)
            #expect(try launch(home, issued.bookmark) == (.fresh, false), "round \(round): the cache other processes wrote is in use")
            if round % 2 == 0 {
                // Revoked by another process; the next launch here, and there, refuses it.
                #expect(CLI.run(["grants", "revoke", "--grant", issued.id.hex], home: home) == 0)
                #expect(try launch(home, issued.bookmark).status == .revoked, "round \(round)")
                #expect(CLI.run(["resolve", "--app", memo.rawValue, file], home: home) == BookmarkStatus.revoked.exitCode)
            } else {
                // Revoked here; the next launch in another process refuses it.
                #expect(try home.broker().revoke(grant: issued.id.hex) == 1)
                #expect(CLI.run(["resolve", "--app", memo.rawValue, file], home: home) == BookmarkStatus.revoked.exitCode, "round \(round)")
                #expect(try launch(home, issued.bookmark).status == .revoked)
            }
        }
    }

    @Test(.enabled(if: CLI.available, "needs the sandboxed-run binary built beside the tests"))
    func launchesRacingARevokeInAnotherProcessNeverHonourItOnceItReturned() throws {
        // Launches here in a tight loop while another process revokes: every
        // launch that began after the revoking process was seen to exit (so
        // after the revoke returned) must find the grant revoked. Launches
        // during the revoke may go either way.
        let home = Home()
        var raced = 0
        for round in 0..<20 {
            let issued = try grant(home, "vault-\(round)")
            #expect(try launch(home, issued.bookmark) == (.fresh, true))
            #expect(try launch(home, issued.bookmark) == (.fresh, false))
            let revoker = try CLI.spawn(["grants", "revoke", "--grant", issued.id.hex], home: home)
            var exited = false
            var afterwards = 0
            while afterwards < 30 {
                let finished = exited
                let result = try launch(home, issued.bookmark)
                if finished {
                    #expect(result.status == .revoked, "round \(round): a launch begun after the revoke returned got \(result)")
                    afterwards += 1
                } else if result == (.fresh, false) {
                    raced += 1  // honoured from the cache while the revoke ran: allowed
                }
                if !exited, let code = CLI.reap(revoker, wait: false) {
                    #expect(code == 0)
                    exited = true
                }
            }
        }
        // The loop really raced the revoke on the cache's path.
        #expect(raced > 0)
    }

    // MARK: A cache that must not be believed

    @Test func anOldCachePutBackAfterARevokeIsRefused() throws {
        let home = Home()
        let issued = try grant(home, "vault")
        _ = try launch(home, issued.bookmark)
        let saved = try Data(contentsOf: URL(fileURLWithPath: cachePath(home)))
        #expect(try launch(home, issued.bookmark) == (.fresh, false))
        #expect(try home.broker().revoke(grant: issued.id.hex) == 1)
        #expect(!FileManager.default.fileExists(atPath: cachePath(home)), "a revoke removes the cache")
        // Replayed: authentic, sealed with the current key, naming the grant live.
        try saved.write(to: URL(fileURLWithPath: cachePath(home)))
        #expect(chmod(cachePath(home), 0o600) == 0)
        #expect(try launch(home, issued.bookmark) == (.revoked, true))
    }

    @Test func aCacheEditedToNameARevokedGrantIsRefused() throws {
        // The cache holds Y, live; X is revoked. ChaChaPoly is a stream
        // cipher: flipping the ciphertext's bits where Y's id lies turns it
        // into X's id, unless the box is authenticated.
        let home = Home()
        let x = try grant(home, "x")
        let y = try grant(home, "y")
        #expect(try home.broker().revoke(grant: x.id.hex) == 1)
        #expect(try launch(home, y.bookmark) == (.fresh, true))
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: cachePath(home))))
        let broker = try home.broker()
        let (keyID, key) = try broker.keyring.current()
        let cache = try #require(try LedgerCache.open(bytes, keyID: keyID, key: key))
        #expect(cache.records.map(\.id) == [y.id])
        // header | nonce | ledger status, -wal flag and status, count | the first record's id
        let at = LedgerCache.header(keyID: keyID).count + 12 + 56 + 1 + (cache.files.wal == nil ? 0 : 56) + 1
        for index in 0..<32 { bytes[at + index] ^= y.id.digest[index] ^ x.id.digest[index] }
        try Data(bytes).write(to: URL(fileURLWithPath: cachePath(home)))
        #expect(try launch(home, x.bookmark) == (.revoked, true))
        #expect(try launch(home, y.bookmark) == (.fresh, true), "the altered cache was ignored, and replaced")
        #expect(try launch(home, y.bookmark) == (.fresh, false))
    }

    @Test(arguments: ["truncated", "empty", "garbage", "another key"])
    func aCacheThatDoesNotOpenIsIgnoredAndReplaced(damage: String) throws {
        let home = Home()
        let issued = try grant(home, "vault")
        _ = try launch(home, issued.bookmark)
        let path = cachePath(home)
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        switch damage {
        case "truncated": try Data(bytes.prefix(bytes.count - 1)).write(to: URL(fileURLWithPath: path))
        case "empty": try Data().write(to: URL(fileURLWithPath: path))
        case "garbage": try Data((0..<bytes.count).map { UInt8(truncatingIfNeeded: $0 &* 31) }).write(to: URL(fileURLWithPath: path))
        default: try home.broker().rotateKey()  // sealed with the old key now
        }
        chmod(path, 0o600)
        #expect(try launch(home, issued.bookmark) == (.fresh, true))
        #expect(try launch(home, issued.bookmark) == (.fresh, false))
    }

    @Test func aWriterThatDoesNotKnowTheCacheStillRevokes() throws {
        // An older sandboxed-run, or the sqlite3 shell, leaves the cache in
        // place: the ledger's files changed, so it is refused.
        let home = Home()
        let issued = try grant(home, "vault")
        _ = try launch(home, issued.bookmark)
        #expect(try launch(home, issued.bookmark) == (.fresh, false))
        let ledger = home.statePath + "/ledger.sqlite"
        _ = try StateIntegrityTests.sqlite(ledger, "UPDATE grants SET revoked = 1")
        #expect(FileManager.default.fileExists(atPath: cachePath(home)))
        #expect(try launch(home, issued.bookmark) == (.revoked, true))
    }

    @Test func aLedgerDamagedBehindTheCacheIsAnError() throws {
        // Same size, same times: only its change time tells.
        let home = Home()
        let issued = try grant(home, "vault")
        _ = try launch(home, issued.bookmark)
        #expect(try launch(home, issued.bookmark) == (.fresh, false))
        let ledger = home.statePath + "/ledger.sqlite"
        var before = stat()
        #expect(stat(ledger, &before) == 0)
        let fd = open(ledger, O_WRONLY)
        let garbage = (0..<Int(before.st_size)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        #expect(pwrite(fd, garbage, garbage.count, 0) == garbage.count)
        close(fd)
        var times = [before.st_atim, before.st_mtim]
        #expect(utimensat(AT_FDCWD, ledger, &times, 0) == 0)
        do {
            let result = try launch(home, issued.bookmark)
            Issue.record("the damaged ledger was not noticed: \(result)")
        } catch {
            #expect("\(error)".contains("is not a sandboxed-run ledger"), "\(error)")
        }
    }

    @Test func aLedgerMadeNewerBehindTheCacheIsAnError() throws {
        let home = Home()
        let issued = try grant(home, "vault")
        _ = try launch(home, issued.bookmark)
        #expect(try launch(home, issued.bookmark) == (.fresh, false))
        _ = try StateIntegrityTests.sqlite(home.statePath + "/ledger.sqlite", "PRAGMA user_version = 99")
        #expect(throws: GrantError.ledgerTooNew(path: home.statePath + "/ledger.sqlite", version: 99, understood: Ledger.schemaVersion)) {
            _ = try launch(home, issued.bookmark)
        }
    }

    @Test(arguments: ["link", "mode 0644", "FIFO", "folder"])
    func anUntrustedCacheFileRefusesTheState(kind: String) throws {
        let home = Home()
        let issued = try grant(home, "vault")
        _ = try launch(home, issued.bookmark)
        let path = cachePath(home)
        let elsewhere = home.path + "/elsewhere"
        try FileManager.default.copyItem(atPath: path, toPath: elsewhere)
        switch kind {
        case "link":
            #expect(unlink(path) == 0 && symlink(elsewhere, path) == 0)
        case "mode 0644":
            #expect(chmod(path, 0o644) == 0)
        case "FIFO":
            #expect(unlink(path) == 0 && mkfifo(path, 0o600) == 0)
        default:
            #expect(unlink(path) == 0 && mkdir(path, 0o700) == 0)
        }
        let said = ["link": "is a symbolic link", "mode 0644": "is accessible to group or others", "FIFO": "is a FIFO", "folder": "is a folder"][kind]!
        do {
            let result = try launch(home, issued.bookmark)
            Issue.record("the state was used: \(result)")
        } catch {
            #expect("\(error)".contains(path + " " + said), "\(error)")
        }
    }

    @Test(.enabled(if: isRoot, "chown needs root"))
    func aCacheAnotherUserOwnsRefusesTheState() throws {
        let home = Home()
        let issued = try grant(home, "vault")
        _ = try launch(home, issued.bookmark)
        #expect(chown(cachePath(home), 65534, 65534) == 0)
        do {
            let result = try launch(home, issued.bookmark)
            Issue.record("the state was used: \(result)")
        } catch {
            #expect("\(error)".contains(cachePath(home) + " is owned by uid 65534"), "\(error)")
        }
    }

    @Test(.enabled(if: isRoot && CLI.available, "mounting needs root, in a mount namespace of its own (unshare -m)"))
    func aReadOnlyStateKeepsNoCacheAndStillResolves() throws {
        let home = Home()
        let issued = try grant(home, "vault")
        let file = home.path + "/vault.bookmark"
        try Data(issued.bookmark).write(to: URL(fileURLWithPath: file))
        let script = """
            mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99
            "$2" resolve --app "$3" "$4" || exit 1
            "$2" resolve --app "$3" "$4" || exit 2
            test ! -e "$1/ledger.cache" || exit 3
            """
        let code = CLI.run(["/usr/bin/unshare", "-m", "/bin/sh", "-c", script, "sh", home.statePath, CLI.binary, memo.rawValue, file],
                           home: home, executable: "/usr/bin/unshare")
        #expect(code == 0, "exit \(code)")
        #expect(!FileManager.default.fileExists(atPath: cachePath(home)))
    }
}

/// The built `sandboxed-run`, run as other processes on a test's state.
enum CLI {
    static let binary: String = {
        if let other = ProcessInfo.processInfo.environment["SANDBOXED_RUN_UNDER_TEST"] { return other }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
        return URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("sandboxed-run").path
    }()

    static var available: Bool { FileManager.default.isExecutableFile(atPath: binary) }

    static func environment(_ home: Home) -> [String] {
        ["XDG_STATE_HOME=\(home.path)/state", "XDG_DATA_HOME=\(home.path)/data", "XDG_RUNTIME_DIR=\(home.path)/run", "HOME=\(home.path)", "PATH=/usr/bin:/bin"]
    }

    /// Starts `sandboxed-run ARGUMENTS` (or `executable`, whose
    /// `arguments` then include argv[0]), its output discarded.
    static func spawn(_ arguments: [String], home: Home, executable: String? = nil) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = (executable == nil ? [binary] + arguments : arguments).map { strdup($0) } + [nil]
        let envp = environment(home).map { strdup($0) } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var pid: pid_t = 0
        let code = posix_spawn(&pid, executable ?? binary, &actions, nil, argv, envp)
        guard code == 0 else { throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EINVAL) }
        return pid
    }

    /// The exit code once `pid` ended; nil while it runs (without `wait`).
    static func reap(_ pid: pid_t, wait: Bool) -> Int32? {
        var status: Int32 = 0
        while true {
            let result = waitpid(pid, &status, wait ? 0 : WNOHANG)
            if result == 0 { return nil }
            if result < 0 { if errno == EINTR { continue }; return -1 }
            return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        }
    }

    /// Runs `sandboxed-run ARGUMENTS` to its end; its exit code.
    static func run(_ arguments: [String], home: Home, executable: String? = nil) -> Int32 {
        guard let pid = try? spawn(arguments, home: home, executable: executable) else { return -1 }
        return reap(pid, wait: true) ?? -1
    }
}
