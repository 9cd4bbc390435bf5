import Foundation
import Testing
import AppSandbox
@testable import Grants
import Sandbox

/// Only a state with no keys and no grants is new. Anything else that does
/// not open whole is an error that says what to do: never a silent restart
/// that loses every grant and invalidates every bookmark.
@Suite struct StateIntegrityTests {
    /// A state with one grant; returns its bookmark and the key's path.
    func populated(_ home: Home) throws -> (bookmark: [UInt8], key: String) {
        let bookmark = try home.broker().grant(app: memo, folder: try home.folder("vault"), access: .readWrite).bookmark
        let key = try #require(try FileManager.default.contentsOfDirectory(atPath: home.statePath + "/keys").first { $0.hasSuffix(".key") })
        return (bookmark, home.statePath + "/keys/" + key)
    }

    func expectDamaged(_ home: Home, naming path: String, saying words: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            let broker = try home.broker()
            let count = try broker.count()
            Issue.record("the state opened, with \(count) grants", sourceLocation: sourceLocation)
        } catch {
            #expect("\(error)".contains(path + " "), "\(error)", sourceLocation: sourceLocation)
            for word in words { #expect("\(error)".contains(word), "\(error)", sourceLocation: sourceLocation) }
        }
    }

    static func sqlite(_ database: String, _ sql: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        process.arguments = [database, sql]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let text = try String(decoding: out.fileHandleForReading.readAll(), as: UTF8.self)
        process.waitUntilExit()
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func aLedgerTruncatedToNothingIsRefusedNotMadeAgain() throws {
        let home = Home()
        let (bookmark, _) = try populated(home)
        #expect(truncate(home.statePath + "/ledger.sqlite", 0) == 0)
        expectDamaged(home, naming: home.statePath + "/ledger.sqlite", saying: ["is empty (0 bytes) while keys exist", "Restore it from a backup", "move \(home.statePath) aside"])
        // Had it been made again, the bookmark would now be "not issued by this broker".
        _ = bookmark
    }

    @Test func aMissingLedgerIsRefusedWhileKeysExist() throws {
        let home = Home()
        _ = try populated(home)
        #expect(unlink(home.statePath + "/ledger.sqlite") == 0)
        expectDamaged(home, naming: home.statePath + "/ledger.sqlite", saying: ["is missing while keys exist", "Restore it from a backup"])
    }

    @Test func aLedgerThatIsNotADatabaseIsRefused() throws {
        let home = Home()
        _ = try populated(home)
        for name in ["ledger.sqlite-wal", "ledger.sqlite-shm"] { unlink(home.statePath + "/" + name) }
        let garbage = Data((0..<16384).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try garbage.write(to: URL(fileURLWithPath: home.statePath + "/ledger.sqlite"))
        expectDamaged(home, naming: home.statePath + "/ledger.sqlite", saying: ["is not a sandboxed-run ledger", "Restore it from a backup"])
    }

    @Test func aDatabaseWithoutGrantsIsNotALedger() throws {
        let home = Home()
        _ = try populated(home)
        _ = try Self.sqlite(home.statePath + "/ledger.sqlite", "DROP TABLE grants; CREATE TABLE other (x)")
        expectDamaged(home, naming: home.statePath + "/ledger.sqlite", saying: ["holds no grants table"])
    }

    @Test func missingKeysAreRefusedWhileTheLedgerHoldsGrants() throws {
        let home = Home()
        let (_, key) = try populated(home)
        #expect(unlink(key) == 0 && unlink(home.statePath + "/keys/current") == 0)
        expectDamaged(home, naming: home.statePath + "/keys", saying: ["holds no keys, but the ledger holds 1 grant", "Restore"])
    }

    @Test func aCurrentNamingAMissingKeyIsRefused() throws {
        let home = Home()
        let (_, key) = try populated(home)
        #expect(unlink(key) == 0)
        let id = ((key as NSString).lastPathComponent as NSString).deletingPathExtension
        expectDamaged(home, naming: home.statePath + "/keys/current", saying: ["names key \(id), which is missing"])
    }

    @Test func aMissingCurrentIsRefusedWhileKeysExist() throws {
        let home = Home()
        _ = try populated(home)
        #expect(unlink(home.statePath + "/keys/current") == 0)
        expectDamaged(home, naming: home.statePath + "/keys/current", saying: ["is missing", "write into it the name"])
    }

    @Test(arguments: [0, 31, 33])
    func aKeyOfTheWrongLengthIsRefused(length: Int) throws {
        let home = Home()
        let (_, key) = try populated(home)
        #expect(truncate(key, off_t(length)) == 0)
        expectDamaged(home, naming: key, saying: ["is damaged (\(length) bytes, not 32)"])
    }

    @Test func aStateWithoutKeysOrGrantsIsNewAndLeftoversAreCleared() throws {
        // A first use interrupted after the ledger was made and before the
        // keys appeared (they appear whole, by rename), with a half-made keys folder left.
        let home = Home()
        _ = try home.broker().list()
        try FileManager.default.createDirectory(atPath: home.statePath + "/keys.tmp-abc", withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: home.statePath + "/keys.tmp-abc/0123456789abcdef.key", contents: Data(count: 32))
        _ = FileManager.default.createFile(atPath: home.statePath + "/ledger.sqlite", contents: Data())
        chmod(home.statePath + "/ledger.sqlite", 0o600)
        let issued = try home.broker().grant(app: memo, folder: try home.folder("vault"), access: .readWrite)
        #expect(try home.broker().resolve(issued.bookmark, app: memo).status == .fresh)
        #expect(!FileManager.default.fileExists(atPath: home.statePath + "/keys.tmp-abc"))
    }

    @Test func resolvingOnANewStateMakesNothing() throws {
        // Resolving only reads: it used to make a key (and the ledger) on first use.
        let home = Home()
        let other = Home()
        let foreign = try other.broker().grant(app: memo, folder: try other.folder("vault"), access: .readWrite).bookmark
        let broker = try home.broker()
        #expect(try broker.resolve(foreign, app: memo).status == .invalid)
        #expect(try broker.list().isEmpty)
        let made = (try? FileManager.default.contentsOfDirectory(atPath: home.statePath)) ?? []
        let keys = (try? FileManager.default.contentsOfDirectory(atPath: home.statePath + "/keys")) ?? []
        #expect(keys.isEmpty && !made.contains("ledger.sqlite"), "made \(made) and keys \(keys)")
    }

    /// The ledger as the first version made it: no `pending`, user_version 0.
    static let firstSchema = """
        PRAGMA journal_mode = WAL;
        CREATE TABLE grants (id BLOB PRIMARY KEY, app TEXT NOT NULL, access TEXT NOT NULL, path TEXT NOT NULL,
            handle BLOB NOT NULL, created INTEGER NOT NULL, revoked INTEGER) WITHOUT ROWID;
        CREATE INDEX grants_by_app ON grants(app);
        CREATE INDEX grants_by_handle ON grants(handle);
        """

    @Test func aLedgerOfTheFirstSchemaIsAdopted() throws {
        let home = Home()
        let (bookmark, _) = try populated(home)
        let ledger = home.statePath + "/ledger.sqlite"
        let old = home.statePath + "/old.sqlite"
        _ = try Self.sqlite(old, Self.firstSchema + """
            ATTACH '\(ledger)' AS current;
            INSERT INTO grants SELECT id, app, access, path, handle, created, revoked FROM current.grants;
            """)
        for name in ["ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"] { unlink(home.statePath + "/" + name) }
        #expect(rename(old, ledger) == 0 && chmod(ledger, 0o600) == 0)
        #expect(try Self.sqlite(ledger, "PRAGMA user_version") == "0")

        // Read as it is, without writing...
        let reader = try home.broker()
        #expect(try reader.resolve(bookmark, app: memo).status == .fresh)
        #expect(try reader.list().map(\.isLive) == [true])
        #expect(try Self.sqlite(ledger, "PRAGMA user_version") == "0")
        // ...and adopted at the first write.
        let writer = try home.broker()
        let second = try writer.grant(app: memo, folder: try home.folder("second"), access: .readOnly, deliver: { _ in })
        #expect(try Self.sqlite(ledger, "PRAGMA user_version") == "1")
        #expect(try Self.sqlite(ledger, "SELECT count(*) FROM grants WHERE pending IS NULL") == "2")
        #expect(try home.broker().resolve(bookmark, app: memo).status == .fresh)
        #expect(try home.broker().resolve(second.bookmark, app: memo).status == .fresh)
    }

    @Test func aNewerSchemaIsRefusedByName() throws {
        let home = Home()
        _ = try populated(home)
        _ = try Self.sqlite(home.statePath + "/ledger.sqlite", "PRAGMA user_version = 7")
        expectDamaged(home, naming: home.statePath + "/ledger.sqlite:", saying: ["ledger schema 7 is newer than this sandboxed-run understands (1): upgrade sandboxed-run"])
    }
}

/// A grant takes effect only once its bookmark is delivered.
@Suite struct PendingGrantTests {
    struct DeliveryFailed: Error {}

    @Test func aGrantIsPendingUntilItsBookmarkIsDelivered() throws {
        let home = Home()
        let broker = try home.broker()
        let vault = try home.folder("vault")
        var during: BookmarkResolution?
        var listed: [GrantRecord] = []
        let issued = try broker.grant(app: memo, folder: vault, access: .readWrite) { bookmark in
            during = try home.broker().resolve(bookmark, app: memo)
            listed = try home.broker().list()
        }
        #expect(during?.status == .invalid)
        #expect(during?.folder == nil)
        #expect(during?.message.contains("did not complete") == true, "\(during?.message ?? "")")
        #expect(listed.count == 1 && listed[0].pending != nil && !listed[0].isLive)
        #expect(try broker.resolve(issued.bookmark, app: memo).status == .fresh)
        #expect(try home.broker().list().map(\.isLive) == [true])
    }

    @Test func aFailedDeliveryLeavesNoGrant() throws {
        let home = Home()
        let broker = try home.broker()
        var delivered: [UInt8] = []
        #expect(throws: DeliveryFailed.self) {
            _ = try broker.grant(app: memo, folder: try home.folder("vault"), access: .readWrite) { bookmark in
                delivered = bookmark
                throw DeliveryFailed()
            }
        }
        #expect(try broker.list().isEmpty)
        #expect(try home.broker().resolve(delivered, app: memo).status == .invalid)
    }

    @Test func aPendingGrantGivesNoAccessThroughTheAppleStyleAPI() throws {
        let home = Home()
        let broker = try home.broker()
        _ = try broker.grant(app: memo, folder: try home.folder("vault"), access: .readWrite) { bookmark in
            var isStale = false
            #expect(throws: BookmarkResolutionError.self) {
                _ = try home.broker().url(resolvingBookmarkData: bookmark, app: memo, bookmarkDataIsStale: &isStale)
            }
        }
    }
}
