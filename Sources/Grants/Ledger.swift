@preconcurrency import Glibc
import CSQLite
import CSyscalls
import Sandbox
import SystemPackage

/// One grant as the ledger keeps it.
public struct GrantRecord: Equatable, Sendable {
    public let id: GrantID
    public let app: String
    public let access: GrantAccess
    /// Where the folder was last seen: at grant time, or where a move was followed.
    public var path: FilePath
    public let handle: [UInt8]
    public let created: Int64
    public var revoked: Int64?
    /// When a pick began that has not completed: its bookmark may never
    /// have been saved, so the grant gives no access (see
    /// `GrantBroker.grant(app:folder:access:deliver:)`).
    public var pending: Int64? = nil

    /// Live: neither revoked nor pending.
    public var isLive: Bool { revoked == nil && pending == nil }
}

/// The grant ledger: SQLite in WAL mode with full fsync, so every change is
/// one transaction that a crash either keeps or drops. Grants are keyed by
/// the SHA-256 of their token and indexed by app and by folder handle, so a
/// million grants resolve as fast as ten.
///
/// Schema versions (`PRAGMA user_version`): 0, the first (no `pending`
/// column), adopted by adding the column; 1, current. A newer one is refused.
///
/// The file is opened only after the state folder and the file itself were
/// checked through descriptors; SQLite gets the folder's canonical path and
/// SQLITE_OPEN_NOFOLLOW, never creates the file (the broker makes it 0600
/// with O_EXCL, and SQLite gives -wal and -shm the database's mode), and the
/// opened file is checked to be the inode that was vetted. (The broker
/// never holds a descriptor of its own on the ledger: closing it would drop
/// SQLite's POSIX locks in this process.)
final class Ledger {
    static let fileName = "ledger.sqlite"
    static let schemaVersion = 1

    enum Access { case readOnly, readWrite }

    let access: Access
    /// As users know it (the state path they gave).
    let path: String
    let statePath: String
    private let state: StateDirectory
    private let database: OpaquePointer
    /// False for a version-0 ledger read without write access.
    private(set) var hasPendingColumn = true
    /// Read as SQLite's `immutable`: the main file alone, with the -wal
    /// empty, in a folder nobody can write or on a disk too full for the
    /// -shm that reading needs (see `init`). True only while no change can
    /// come, so it is read under the state's lock and never kept.
    let isSnapshot: Bool

    /// Opens the ledger in `state`, checked as `vetted` (its status, read
    /// without following links). With `create`, a ledger without tables
    /// gets the current schema; otherwise it is refused as not a ledger.
    init(state: StateDirectory, vetted: stat, access: Access, create: Bool = false) throws(GrantError) {
        self.access = access
        path = state.path + "/" + Self.fileName
        statePath = state.path
        self.state = state
        let folderPath = try state.canonicalPath()
        let canonical = (folderPath == "/" ? "" : folderPath) + "/" + Self.fileName
        try Self.checkCompanions(state: state, shown: path)
        var readOnlyFolderFallback = false
        var opened: OpaquePointer?
        while true {
            opened = try Self.open(canonical, shown: path, access: access, immutable: readOnlyFolderFallback)
            // Opening is lazy: make SQLite read the header now.
            let probe = Self.userVersion(opened!)
            if access == .readOnly, !readOnlyFolderFallback,
               probe.code & 0xFF == SQLITE_READONLY || probe.code & 0xFF == SQLITE_CANTOPEN || Self.lacksSpace(opened!, probe.code),
               try Self.walIsEmpty(state: state, shown: path) {
                // SQLite 3.40 cannot read a WAL database in a folder it may not
                // write unless -wal and -shm exist, nor where the disk is too
                // full for the -shm it makes when no other connection has one
                // (a command in a sandbox may have filled it). With no -wal
                // content, the main file is the whole ledger, and under the
                // state's lock no writer of ours can change it: read it as
                // immutable, under that lock only (`isSnapshot`).
                sqlite3_close_v2(opened)
                readOnlyFolderFallback = true
                continue
            }
            if probe.code != SQLITE_OK {
                let message = String(cString: sqlite3_errmsg(opened))
                let full = Self.lacksSpace(opened!, probe.code)
                sqlite3_close_v2(opened)
                throw Self.explain(probe.code, message: message, full: full, path: path, state: state, folderPath: folderPath, access: access)
            }
            break
        }
        database = opened!
        isSnapshot = readOnlyFolderFallback
        // What SQLite opened is the file that was vetted: same inode, at the
        // same name in the same folder.
        var now = stat()
        var folderNow = stat()
        guard fstatat(state.descriptor.rawValue, Self.fileName, &now, AT_SYMLINK_NOFOLLOW) == 0,
              now.st_dev == vetted.st_dev, now.st_ino == vetted.st_ino,
              stat(folderPath, &folderNow) == 0, let folder = try? state.descriptor.status(),
              folderNow.st_dev == folder.st_dev, folderNow.st_ino == folder.st_ino else {
            sqlite3_close_v2(database)
            throw .untrustedState(path: path, problem: "changed while it was being opened", fix: "Try again; if it persists, check who else writes \(state.path).")
        }
        do {
            try prepareSchema(create: create)
        } catch {
            sqlite3_close_v2(database)
            throw error
        }
    }

    deinit {
        sqlite3_close_v2(database)
    }

    /// SQLite maps the -shm (the WAL index) shared and writes it through the
    /// mapping. It grows that file by writing one byte at the end of each
    /// 4 KiB page: where blocks are smaller (ext4 of 1 KiB blocks, what
    /// mkfs.ext4 makes under 512 MB) each page keeps holes, and the first
    /// write into one on a full disk raises SIGBUS, killing `revoke`,
    /// `resolve` or a launcher. So SQLite's `mmap` is replaced, once in the
    /// process and before its first connection, by one that gives a writable
    /// mapping its blocks first (`csb_mmap_allocated`); on a full disk the
    /// mapping fails instead, SQLITE_IOERR_SHMMAP with ENOSPC (`lacksSpace`:
    /// a reader takes the snapshot, a revocation the reserve). This keeps WAL
    /// and its locking as they are for every process: a launcher that keeps
    /// the ledger open mapped it while there was room, so a revoke then finds
    /// every page backed. Not chosen: sizing the -shm ahead (SQLite's first
    /// connection cuts it to 3 bytes, its last removes it); `locking_mode =
    /// EXCLUSIVE` (no -shm, but one connection at a time: a revoke would wait
    /// on every running launcher); another `journal_mode` (a change of the
    /// file for every version, readers and writers waiting on each other);
    /// `mmap_size = 0` (the database file's mapping only, 0 already).
    private static let allocatingSharedMemory: GrantError? = {
        guard let vfs = sqlite3_vfs_find(nil), let set = vfs.pointee.xSetSystemCall else {
            return .ledger("this SQLite has no default VFS whose system calls can be set: its -shm could not be kept from SIGBUS on a full disk")
        }
        let map: @convention(c) (UnsafeMutableRawPointer?, Int, CInt, CInt, CInt, off_t) -> UnsafeMutableRawPointer? = csb_mmap_allocated
        let code = set(vfs, "mmap", unsafeBitCast(map, to: sqlite3_syscall_ptr.self))
        return code == SQLITE_OK ? nil : .ledger("this SQLite's VFS does not let its mmap be set (SQLite code \(code)): its -shm could not be kept from SIGBUS on a full disk")
    }()

    private static func open(_ canonical: String, shown: String, access: Access, immutable: Bool) throws(GrantError) -> OpaquePointer {
        if let error = allocatingSharedMemory { throw error }
        var handle: OpaquePointer?
        let mode = access == .readWrite ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY
        let flags = mode | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI
        let uri = "file:" + percentEncoded(canonical) + (immutable ? "?immutable=1" : "")
        guard sqlite3_open_v2(uri, &handle, flags, nil) == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(handle)
            throw .ledger("opening \(shown): \(message)")
        }
        sqlite3_extended_result_codes(handle, 1)
        // Before the first read: another process's transaction is waited for,
        // not reported as "database is locked".
        sqlite3_busy_timeout(handle, 10_000)
        return handle
    }

    /// Whether SQLite failed for want of space (or quota) on the disk.
    private static func lacksSpace(_ database: OpaquePointer, _ code: Int32) -> Bool {
        if code & 0xFF == SQLITE_FULL { return true }
        let system = sqlite3_system_errno(database)
        return [SQLITE_IOERR, SQLITE_CANTOPEN].contains(code & 0xFF) && (system == ENOSPC || system == EDQUOT)
    }

    private static func userVersion(_ database: OpaquePointer) -> (code: Int32, version: Int) {
        var statement: OpaquePointer?
        var code = sqlite3_prepare_v2(database, "PRAGMA user_version", -1, &statement, nil)
        var version = 0
        if code == SQLITE_OK {
            code = sqlite3_step(statement)
            if code == SQLITE_ROW {
                version = Int(sqlite3_column_int64(statement, 0))
                code = SQLITE_OK
            } else {
                code = sqlite3_extended_errcode(database)
            }
        } else {
            code = sqlite3_extended_errcode(database)
        }
        sqlite3_finalize(statement)
        return (code, version)
    }

    /// An SQLite failure to open, said as what it means for the user.
    private static func explain(_ code: Int32, message: String, full: Bool, path: String, state: StateDirectory, folderPath: String, access: Access) -> GrantError {
        if full {
            let said = "database or disk is full"
            return .ledger("opening \(path): \(message == said ? said : said + " (\(message), SQLite code \(code))")")
        }
        if access == .readWrite, code & 0xFF == SQLITE_READONLY || code & 0xFF == SQLITE_CANTOPEN,
           Glibc.access(folderPath, W_OK) != 0 || Glibc.access(folderPath + "/" + fileName, W_OK) != 0 {
            return .readOnlyState(path: state.path, needed: "this command")
        }
        switch code & 0xFF {
        case SQLITE_NOTADB, SQLITE_CORRUPT:
            return .damagedState(
                path: path, problem: "is not a sandboxed-run ledger (\(message))",
                fix: "Restore it from a backup; or, to start over (every bookmark becomes invalid), move \(state.path) aside.")
        case SQLITE_READONLY where access == .readOnly, SQLITE_CANTOPEN where access == .readOnly:
            return .ledger("opening \(path): \(message). The folder is read-only and the ledger has changes not yet merged (\(fileName)-wal): open it once with write access")
        default:
            return .ledger("opening \(path): \(message) (SQLite code \(code))")
        }
    }

    /// -wal and -shm, if present, must be private files of the user's, as
    /// the ledger is: SQLite opens them by name.
    private static func checkCompanions(state: StateDirectory, shown: String) throws(GrantError) {
        for suffix in ["-wal", "-shm"] {
            var st = stat()
            guard fstatat(state.descriptor.rawValue, fileName + suffix, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            try StateDirectory.checkPrivate(st, path: shown + suffix, kind: S_IFREG)
        }
    }

    private static func walIsEmpty(state: StateDirectory, shown: String) throws(GrantError) -> Bool {
        var st = stat()
        guard fstatat(state.descriptor.rawValue, fileName + "-wal", &st, AT_SYMLINK_NOFOLLOW) == 0 else { return true }
        return st.st_size == 0
    }

    private static func percentEncoded(_ path: String) -> String {
        var out = ""
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "/"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + String(byte >> 4, radix: 16) + String(byte & 0xF, radix: 16)
            }
        }
        return out
    }

    /// Checks the version; creates the schema (with `create`) or adopts a
    /// version-0 ledger (with write access).
    private func prepareSchema(create: Bool) throws(GrantError) {
        if access == .readWrite {
            try execute("PRAGMA journal_mode = WAL")
        }
        try execute("PRAGMA synchronous = FULL")
        let version = try scalar("PRAGMA user_version")
        if version > Self.schemaVersion {
            throw .ledgerTooNew(path: path, version: Int(version), understood: Self.schemaVersion)
        }
        let hasTable = try scalar("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'grants'") == 1
        if !hasTable {
            let tables = try scalar("SELECT count(*) FROM sqlite_schema")
            guard create, version == 0, tables == 0, access == .readWrite else {
                throw .damagedState(
                    path: path, problem: "holds no grants table: it is not a sandboxed-run ledger",
                    fix: "Restore it from a backup; or, to start over (every bookmark becomes invalid), move its folder aside.")
            }
        } else if version == Self.schemaVersion {
            return
        }
        guard access == .readWrite else {
            hasPendingColumn = false  // version 0, read as it is
            return
        }
        try transaction { () throws(GrantError) in
            // Another process may have done it meanwhile.
            let current = try scalar("PRAGMA user_version")
            let table = try scalar("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'grants'") == 1
            if table && current == Self.schemaVersion { return }
            if table {
                // Version 0: the same table without `pending`.
                try execute("ALTER TABLE grants ADD COLUMN pending INTEGER")
            } else {
                try execute("""
                    CREATE TABLE grants (
                        id BLOB PRIMARY KEY,
                        app TEXT NOT NULL,
                        access TEXT NOT NULL,
                        path TEXT NOT NULL,
                        handle BLOB NOT NULL,
                        created INTEGER NOT NULL,
                        revoked INTEGER,
                        pending INTEGER
                    ) WITHOUT ROWID
                    """)
            }
            try execute("CREATE INDEX IF NOT EXISTS grants_by_app ON grants(app)")
            try execute("CREATE INDEX IF NOT EXISTS grants_by_handle ON grants(handle)")
            try execute("PRAGMA user_version = \(Self.schemaVersion)")
        }
    }

    private var columns: String {
        "id, app, access, path, handle, created, revoked, " + (hasPendingColumn ? "pending" : "NULL")
    }

    /// Records grants: live, or pending since `pending` (a Unix time).
    func insert(_ records: [GrantRecord]) throws(GrantError) {
        try changing { () throws(GrantError) in try transaction { () throws(GrantError) in
            let statement = try prepare("INSERT INTO grants (id, app, access, path, handle, created, revoked, pending) VALUES (?, ?, ?, ?, ?, ?, NULL, ?)")
            for record in records {
                try statement.bind(record.id.digest, record.app, record.access.rawValue, record.path, record.handle, record.created,
                                   record.pending.map { $0 as any SQLValue } ?? SQLNull())
                try statement.stepDone()
                statement.reset()
            }
        } }
    }

    /// A pending grant's bookmark was delivered: it becomes live.
    func activate(_ id: GrantID) throws(GrantError) {
        try changing { () throws(GrantError) in
            let statement = try prepare("UPDATE grants SET pending = NULL WHERE id = ? AND pending IS NOT NULL")
            try statement.bind(id.digest)
            try statement.stepDone()
        }
    }

    /// A pending grant's bookmark could not be delivered: it is forgotten.
    func discard(_ id: GrantID) throws(GrantError) {
        try changing { () throws(GrantError) in
            let statement = try prepare("DELETE FROM grants WHERE id = ? AND pending IS NOT NULL")
            try statement.bind(id.digest)
            try statement.stepDone()
        }
    }

    /// Records as read, with the revocations the reserve holds applied:
    /// the reserve read first (see `RevocationReserve.held`).
    private func applyingHeld(_ query: () throws(GrantError) -> [GrantRecord]) throws(GrantError) -> [GrantRecord] {
        let held = try RevocationReserve.held(in: state)
        let records = try query()
        return held.isEmpty ? records : records.map { RevocationReserve.applying(held, to: $0) }
    }

    func find(_ id: GrantID) throws(GrantError) -> GrantRecord? {
        try applyingHeld { () throws(GrantError) in
            let statement = try prepare("SELECT \(columns) FROM grants WHERE id = ?")
            try statement.bind(id.digest)
            return try statement.rows()
        }.first
    }

    /// Every grant `target` names (revoked or not).
    func find(_ target: RevocationReserve.Target) throws(GrantError) -> [GrantRecord] {
        switch target {
        case .grant(let id): try find(id).map { [$0] } ?? []
        case .app(let app): try list(app: app)
        case .folder(let handle): try find(handle: handle)
        }
    }

    /// Grants whose id starts with the hex `prefix` (for `revoke --grant`).
    func find(prefix: String) throws(GrantError) -> [GrantRecord] {
        // Ids are exactly 32 bytes: the prefix padded with 0s and with fs bounds them.
        let digits = 64
        guard !prefix.isEmpty, prefix.count <= digits,
              let low = Keyring.decodeHex(prefix + String(repeating: "0", count: digits - prefix.count)),
              let high = Keyring.decodeHex(prefix + String(repeating: "f", count: digits - prefix.count)) else { return [] }
        return try applyingHeld { () throws(GrantError) in
            let statement = try prepare("SELECT \(columns) FROM grants WHERE id >= ? AND id <= ? LIMIT 2")
            try statement.bind(low, high)
            return try statement.rows()
        }
    }

    /// Every grant of the folder with file handle `handle`, for every app.
    func find(handle: [UInt8]) throws(GrantError) -> [GrantRecord] {
        try applyingHeld { () throws(GrantError) in
            let statement = try prepare("SELECT \(columns) FROM grants WHERE handle = ?")
            try statement.bind(handle)
            return try statement.rows()
        }
    }

    func list(app: String?) throws(GrantError) -> [GrantRecord] {
        try applyingHeld { () throws(GrantError) in
            let statement: Statement
            if let app {
                statement = try prepare("SELECT \(columns) FROM grants WHERE app = ? ORDER BY created, path")
                try statement.bind(app)
            } else {
                statement = try prepare("SELECT \(columns) FROM grants ORDER BY app, created, path")
            }
            return try statement.rows()
        }
    }

    func count() throws(GrantError) -> Int {
        Int(try scalar("SELECT count(*) FROM grants"))
    }
    /// Marks the live grants `target` names revoked at `time`; how many.
    /// Inside a transaction.
    private func apply(_ target: RevocationReserve.Target, at time: Int64) throws(GrantError) -> Int {
        let (column, value): (String, any SQLValue) = switch target {
        case .grant(let id): ("id", id.digest)
        case .app(let app): ("app", app)
        case .folder(let handle): ("handle", handle)
        }
        let statement = try prepare("UPDATE grants SET revoked = ? WHERE revoked IS NULL AND \(column) = ?")
        try statement.bind(time, value)
        try statement.stepDone()
        return Int(sqlite3_changes(database))
    }

    /// Writes every revocation the reserve holds, and `direct` (revoked at
    /// `time`: for a state without a reserve), into the ledger in one
    /// transaction, then frees their slots; how many grants that revoked.
    /// Under the state's exclusive lock, the launch cache removed. Every
    /// change of the ledger runs it first (`changing`), so that no grant is
    /// made while a slot of the reserve is held (an app's or folder's slot
    /// then names only grants that were there when it was revoked).
    @discardableResult
    func fold(direct: [RevocationReserve.Target] = [], at time: Int64 = Int64(Glibc.time(nil))) throws(GrantError) -> Int {
        var reserve = try RevocationReserve.open(in: state)
        let held = reserve?.entries ?? []
        guard !held.isEmpty || !direct.isEmpty else { return 0 }
        var count = 0
        try transaction { () throws(GrantError) in
            for entry in held { count += try apply(entry.target, at: entry.time) }
            for target in direct { count += try apply(target, at: time) }
        }
        // Freed only once committed: a crash before leaves them held, and
        // folding them again changes nothing (`revoked IS NULL`).
        try reserve?.release(held)
        return count
    }

    /// Every folder an app could write at some time, as its file handle and,
    /// where recorded, its filesystem: every read-write grant, whatever became
    /// of it (live, revoked, pending, moved), and every folder a policy made
    /// writable at a launch. Grants made before the `writable` table existed
    /// have no filesystem recorded: their handle alone is compared.
    func everWritableFolders() throws(GrantError) -> [LinkTrust.FolderKey] {
        var sql = "SELECT DISTINCT handle, NULL, NULL FROM grants WHERE access = ?"
        if try scalar("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'writable'") == 1 {
            sql = "SELECT handle, NULL, NULL FROM grants WHERE access = ? AND handle NOT IN (SELECT handle FROM writable)"
                + " UNION SELECT handle, fsid, fstype FROM writable"
        }
        let statement = try prepare(sql)
        try statement.bind(GrantAccess.readWrite.rawValue)
        var folders: [LinkTrust.FolderKey] = []
        while try statement.step() {
            let count = Int(sqlite3_column_bytes(statement.pointer, 0))
            guard count > 0, let base = sqlite3_column_blob(statement.pointer, 0) else { continue }
            let handle = Array(UnsafeRawBufferPointer(start: base, count: count))
            let known = sqlite3_column_type(statement.pointer, 1) != SQLITE_NULL
            folders.append(LinkTrust.FolderKey(
                handle: handle,
                filesystem: known ? (UInt64(bitPattern: sqlite3_column_int64(statement.pointer, 1)), UInt64(bitPattern: sqlite3_column_int64(statement.pointer, 2))) : nil))
        }
        return folders
    }

    /// Records a folder an app may write from now on, with its filesystem, so
    /// that what the app plants there is never trusted later (see `LinkTrust`):
    /// a read-write grant (in the transaction that inserts it), or a policy's
    /// read-write system folder at a launch. Kept for ever, as revoked grants
    /// are. The table sits beside `grants` without a new schema version: a
    /// version that does not know it reads the ledger as before.
    func recordWritable(_ identity: FolderIdentity, path: FilePath, source: String, at time: Int64) throws(GrantError) {
        try changing { () throws(GrantError) in
            try execute("CREATE TABLE IF NOT EXISTS writable (handle BLOB NOT NULL, fsid INTEGER NOT NULL, fstype INTEGER NOT NULL, "
                + "path TEXT NOT NULL, source TEXT NOT NULL, first INTEGER NOT NULL, PRIMARY KEY (handle, fsid, fstype)) WITHOUT ROWID")
            let statement = try prepare("INSERT OR IGNORE INTO writable (handle, fsid, fstype, path, source, first) VALUES (?, ?, ?, ?, ?, ?)")
            try statement.bind(identity.handle, Int64(bitPattern: identity.filesystemID), Int64(bitPattern: identity.filesystemType), path, source, time)
            try statement.stepDone()
        }
    }

    /// Whether `identity` is recorded in `writable` already (then
    /// `recordWritable` would change nothing, and need not be called).
    func isRecordedWritable(_ identity: FolderIdentity) throws(GrantError) -> Bool {
        guard try scalar("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'writable'") == 1 else { return false }
        let statement = try prepare("SELECT count(*) FROM writable WHERE handle = ? AND fsid = ? AND fstype = ?")
        try statement.bind(identity.handle, Int64(bitPattern: identity.filesystemID), Int64(bitPattern: identity.filesystemType))
        return try statement.step() && sqlite3_column_int64(statement.pointer, 0) > 0
    }

    func updatePath(_ id: GrantID, to path: FilePath) throws(GrantError) {
        try changing { () throws(GrantError) in
            let statement = try prepare("UPDATE grants SET path = ? WHERE id = ?")
            try statement.bind(path, id.digest)
            try statement.stepDone()
        }
    }

    // MARK: SQLite plumbing

    private func execute(_ sql: String) throws(GrantError) {
        var message: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(database, sql, nil, nil, &message)
        guard code == SQLITE_OK else {
            let text = message.map { String(cString: $0) } ?? "unknown error"
            sqlite3_free(message)
            throw failure(code, text)
        }
    }

    private func scalar(_ sql: String) throws(GrantError) -> Int64 {
        let statement = try prepare(sql)
        guard try statement.step() else { return 0 }
        return sqlite3_column_int64(statement.pointer, 0)
    }

    private func failure(_ code: Int32, _ text: String) -> GrantError {
        code & 0xFF == SQLITE_READONLY ? .readOnlyState(path: statePath, needed: "this command") : .ledger(text)
    }

    /// Every change to the ledger (but the schema's, made under the
    /// broker's own exclusive lock: `GrantBroker.writing`): under the state's
    /// exclusive lock, after the launch cache is removed, so that no launch
    /// goes on trusting what was read before it (see `LedgerCache`), and
    /// after the revocations the reserve holds are folded in (`fold`). A
    /// state without a reserve gets one now, while there is room (one made
    /// before reserves existed, or whose making failed).
    private func changing<T>(_ body: () throws(GrantError) -> T) throws(GrantError) -> T {
        try state.withLock(exclusive: true) { () throws(GrantError) -> T in
            try LedgerCache.remove(from: state)
            try fold()
            let result = try body()
            try? RevocationReserve.make(in: state)
            return result
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
struct SQLNull: SQLValue {}
extension String: SQLValue {}
extension Int64: SQLValue {}
extension FilePath: SQLValue {}
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
            case let path as FilePath:
                // TEXT with the path's exact bytes: SQLite does not insist on UTF-8.
                let bytes = path.bytes
                result = (bytes + [0]).withUnsafeBytes {
                    sqlite3_bind_text(pointer, index, $0.baseAddress!.assumingMemoryBound(to: CChar.self), Int32(bytes.count), Self.transient)
                }
            case let number as Int64: result = sqlite3_bind_int64(pointer, index, number)
            case let blob as [UInt8]: result = blob.withUnsafeBytes { sqlite3_bind_blob(pointer, index, $0.baseAddress, Int32($0.count), Self.transient) }
            case is SQLNull: result = sqlite3_bind_null(pointer, index)
            default: result = SQLITE_MISUSE
            }
            guard result == SQLITE_OK else { throw .ledger(String(cString: sqlite3_errmsg(database))) }
        }
    }

    func step() throws(GrantError) -> Bool {
        switch sqlite3_step(pointer) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        case let code:
            let message = String(cString: sqlite3_errmsg(database))
            throw code & 0xFF == SQLITE_READONLY ? .ledger(message + ": the state folder or ledger is read-only, and this command needs to write it") : .ledger(message)
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
            func path(_ column: Int32) -> FilePath {
                guard let base = sqlite3_column_text(pointer, column) else { return FilePath() }
                let count = Int(sqlite3_column_bytes(pointer, column))
                return FilePath(bytes: Array(UnsafeBufferPointer(start: base, count: count)))
            }
            records.append(GrantRecord(
                id: GrantID(digest: blob(0)), app: text(1), access: GrantAccess(rawValue: text(2)) ?? .readOnly,
                path: path(3), handle: blob(4), created: sqlite3_column_int64(pointer, 5),
                revoked: sqlite3_column_type(pointer, 6) == SQLITE_NULL ? nil : sqlite3_column_int64(pointer, 6),
                pending: sqlite3_column_type(pointer, 7) == SQLITE_NULL ? nil : sqlite3_column_int64(pointer, 7)))
        }
        return records
    }
}
