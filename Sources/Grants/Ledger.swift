@preconcurrency import Glibc
import CSQLite

/// One grant as the ledger keeps it.
public struct GrantRecord: Equatable, Sendable {
    public let id: GrantID
    public let app: String
    public let access: GrantAccess
    /// Where the folder was last seen: at grant time, or where a move was followed.
    public var path: String
    public let handle: [UInt8]
    public let created: Int64
    public var revoked: Int64?
}

/// The grant ledger: SQLite in WAL mode with full fsync, so every change is
/// one transaction that a crash either keeps or drops. Grants are keyed by
/// the SHA-256 of their token and indexed by app and by folder handle, so a
/// million grants resolve as fast as ten.
final class Ledger {
    private let database: OpaquePointer

    init(path: String) throws(GrantError) {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        guard sqlite3_open_v2(path, &handle, flags, nil) == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close(handle)
            throw .ledger("opening \(path): \(message)")
        }
        database = handle
        chmod(path, 0o600)
        sqlite3_busy_timeout(database, 10_000)
        try execute("""
            PRAGMA journal_mode = WAL;
            PRAGMA synchronous = FULL;
            CREATE TABLE IF NOT EXISTS grants (
                id BLOB PRIMARY KEY,
                app TEXT NOT NULL,
                access TEXT NOT NULL,
                path TEXT NOT NULL,
                handle BLOB NOT NULL,
                created INTEGER NOT NULL,
                revoked INTEGER
            ) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS grants_by_app ON grants(app);
            CREATE INDEX IF NOT EXISTS grants_by_handle ON grants(handle);
            """)
    }

    deinit {
        sqlite3_close_v2(database)
    }

    func insert(_ records: [GrantRecord]) throws(GrantError) {
        try transaction { () throws(GrantError) in
            let statement = try prepare("INSERT INTO grants (id, app, access, path, handle, created, revoked) VALUES (?, ?, ?, ?, ?, ?, NULL)")
            for record in records {
                try statement.bind(record.id.digest, record.app, record.access.rawValue, record.path, record.handle, record.created)
                try statement.stepDone()
                statement.reset()
            }
        }
    }

    func find(_ id: GrantID) throws(GrantError) -> GrantRecord? {
        let statement = try prepare("SELECT id, app, access, path, handle, created, revoked FROM grants WHERE id = ?")
        try statement.bind(id.digest)
        return try statement.rows().first
    }

    /// Grants whose id starts with the hex `prefix` (for `revoke --grant`).
    func find(prefix: String) throws(GrantError) -> [GrantRecord] {
        // Ids are exactly 32 bytes: the prefix padded with 0s and with fs bounds them.
        let digits = 64
        guard !prefix.isEmpty, prefix.count <= digits,
              let low = Keyring.decodeHex(prefix + String(repeating: "0", count: digits - prefix.count)),
              let high = Keyring.decodeHex(prefix + String(repeating: "f", count: digits - prefix.count)) else { return [] }
        let statement = try prepare("SELECT id, app, access, path, handle, created, revoked FROM grants WHERE id >= ? AND id <= ? LIMIT 2")
        try statement.bind(low, high)
        return try statement.rows()
    }

    func list(app: String?) throws(GrantError) -> [GrantRecord] {
        let statement: Statement
        if let app {
            statement = try prepare("SELECT id, app, access, path, handle, created, revoked FROM grants WHERE app = ? ORDER BY created, path")
            try statement.bind(app)
        } else {
            statement = try prepare("SELECT id, app, access, path, handle, created, revoked FROM grants ORDER BY app, created, path")
        }
        return try statement.rows()
    }

    func count() throws(GrantError) -> Int {
        let statement = try prepare("SELECT count(*) FROM grants")
        guard try statement.step() else { return 0 }
        return Int(sqlite3_column_int64(statement.pointer, 0))
    }

    /// Marks matching live grants revoked; returns how many.
    func revoke(id: GrantID? = nil, app: String? = nil, handle: [UInt8]? = nil, at time: Int64) throws(GrantError) -> Int {
        var conditions = ["revoked IS NULL"]
        if id != nil { conditions.append("id = ?") }
        if app != nil { conditions.append("app = ?") }
        if handle != nil { conditions.append("handle = ?") }
        let statement = try prepare("UPDATE grants SET revoked = ? WHERE " + conditions.joined(separator: " AND "))
        var values: [any SQLValue] = [time]
        if let id { values.append(id.digest) }
        if let app { values.append(app) }
        if let handle { values.append(handle) }
        try statement.bind(values)
        try statement.stepDone()
        return Int(sqlite3_changes(database))
    }

    func updatePath(_ id: GrantID, to path: String) throws(GrantError) {
        let statement = try prepare("UPDATE grants SET path = ? WHERE id = ?")
        try statement.bind(path, id.digest)
        try statement.stepDone()
    }

    // MARK: SQLite plumbing

    private func execute(_ sql: String) throws(GrantError) {
        var message: UnsafeMutablePointer<CChar>?
        guard sqlite3_exec(database, sql, nil, nil, &message) == SQLITE_OK else {
            let text = message.map { String(cString: $0) } ?? "unknown error"
            sqlite3_free(message)
            throw .ledger(text)
        }
    }

    private func transaction(_ body: () throws(GrantError) -> Void) throws(GrantError) {
        try execute("BEGIN IMMEDIATE")
        do {
            try body()
            try execute("COMMIT")
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    private func prepare(_ sql: String) throws(GrantError) -> Statement {
        var pointer: OpaquePointer?
        guard sqlite3_prepare_v2(database, sql, -1, &pointer, nil) == SQLITE_OK, let pointer else {
            throw .ledger(String(cString: sqlite3_errmsg(database)))
        }
        return Statement(pointer: pointer, database: database)
    }
}

protocol SQLValue {}
extension String: SQLValue {}
extension Int64: SQLValue {}
extension Array: SQLValue where Element == UInt8 {}

/// A prepared statement, finalized when dropped.
final class Statement {
    let pointer: OpaquePointer
    private let database: OpaquePointer
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    init(pointer: OpaquePointer, database: OpaquePointer) {
        self.pointer = pointer
        self.database = database
    }

    deinit { sqlite3_finalize(pointer) }

    func bind(_ values: any SQLValue...) throws(GrantError) { try bind(values) }

    func bind(_ values: [any SQLValue]) throws(GrantError) {
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let result: Int32
            switch value {
            case let text as String: result = sqlite3_bind_text(pointer, index, text, -1, Self.transient)
            case let number as Int64: result = sqlite3_bind_int64(pointer, index, number)
            case let blob as [UInt8]: result = blob.withUnsafeBytes { sqlite3_bind_blob(pointer, index, $0.baseAddress, Int32($0.count), Self.transient) }
            default: result = SQLITE_MISUSE
            }
            guard result == SQLITE_OK else { throw .ledger(String(cString: sqlite3_errmsg(database))) }
        }
    }

    func step() throws(GrantError) -> Bool {
        switch sqlite3_step(pointer) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw .ledger(String(cString: sqlite3_errmsg(database)))
        }
    }

    func stepDone() throws(GrantError) {
        _ = try step()
    }

    func reset() {
        sqlite3_reset(pointer)
        sqlite3_clear_bindings(pointer)
    }

    func rows() throws(GrantError) -> [GrantRecord] {
        var records: [GrantRecord] = []
        while try step() {
            func text(_ column: Int32) -> String { String(cString: sqlite3_column_text(pointer, column)) }
            func blob(_ column: Int32) -> [UInt8] {
                let count = Int(sqlite3_column_bytes(pointer, column))
                guard count > 0, let base = sqlite3_column_blob(pointer, column) else { return [] }
                return Array(UnsafeRawBufferPointer(start: base, count: count))
            }
            records.append(GrantRecord(
                id: GrantID(digest: blob(0)), app: text(1), access: GrantAccess(rawValue: text(2)) ?? .readOnly,
                path: text(3), handle: blob(4), created: sqlite3_column_int64(pointer, 5),
                revoked: sqlite3_column_type(pointer, 6) == SQLITE_NULL ? nil : sqlite3_column_int64(pointer, 6)))
        }
        return records
    }
}
