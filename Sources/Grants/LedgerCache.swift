@preconcurrency import Glibc
import Crypto
import Sandbox
import SystemPackage

/// Live grants as a launch last read them from the ledger, so that the next
/// launch with the same bookmark need not open SQLite (opening it, reading
/// its schema and rebuilding its WAL index is most of what a grant adds to a
/// launch). `ledger.cache` in the state folder:
///
///     "SRLC" | version: u8 | key id: 8 bytes |
///     ChaChaPoly sealed box of: ledger status | -wal status | count: u8 | records
///
/// A cached record is used only when it says what the ledger says now:
/// - Every change to the ledger first removes the cache (and syncs the
///   folder) under the state's exclusive lock (`Ledger.changing`,
///   `GrantBroker.writing`); the cache is written only under the shared
///   lock, from a read of the ledger made under that same lock. So a cache
///   that exists was written after the last change, from the ledger as the
///   change left it; a change made meanwhile removed it before committing.
/// - The status (device, inode, size, modification and change times) of the
///   ledger and its -wal, read before that read of the ledger, must be the
///   same now: a writer that does not know of the cache (an older
///   sandboxed-run, the sqlite3 shell) changes them. A write to a file whose
///   status was read always gets new times on kernels with fine-grained
///   timestamps (6.13 on, ext4, xfs, btrfs and tmpfs); on older ones, two
///   writes in one clock tick that leave the -wal's size alone look alike.
/// - It is sealed with the current key: a cache altered in any byte, or
///   sealed with another key, is ignored and the ledger read instead.
/// - It holds live grants only: a revoked, pending or unknown grant is always
///   looked up in the ledger.
/// Like every file of the state it must be a private regular file of the
/// user's (`StateDirectory.checkPrivate`), or the state is refused.
struct LedgerCache {
    static let fileName = "ledger.cache"
    static let magic: [UInt8] = Array("SRLC".utf8)
    static let version: UInt8 = 1
    /// The records kept: the grants launched last.
    static let capacity = 16
    /// A cache this large was not written by a launch.
    static let sizeLimit = 256 * 1024

    /// What identifies one version of a file's content. Without the change
    /// time for the -wal: SQLite, run by root, chowns the -wal to the
    /// ledger's owner at every open (a change of its change time and nothing
    /// else), which would make each launch that reads the ledger void the
    /// cache of the others. Writes change the modification time as well.
    struct FileStatus: Equatable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var modified: Int64
        var modifiedNanoseconds: Int64
        var changed: Int64
        var changedNanoseconds: Int64

        init(_ st: stat, changeTime: Bool = true) {
            device = UInt64(st.st_dev)
            inode = UInt64(st.st_ino)
            size = Int64(st.st_size)
            modified = Int64(st.st_mtim.tv_sec)
            modifiedNanoseconds = Int64(st.st_mtim.tv_nsec)
            changed = changeTime ? Int64(st.st_ctim.tv_sec) : 0
            changedNanoseconds = changeTime ? Int64(st.st_ctim.tv_nsec) : 0
        }

        init(device: UInt64, inode: UInt64, size: Int64, modified: Int64, modifiedNanoseconds: Int64, changed: Int64, changedNanoseconds: Int64) {
            self.device = device
            self.inode = inode
            self.size = size
            self.modified = modified
            self.modifiedNanoseconds = modifiedNanoseconds
            self.changed = changed
            self.changedNanoseconds = changedNanoseconds
        }
    }

    /// The ledger's files as they are.
    struct Files: Equatable {
        var ledger: FileStatus
        var wal: FileStatus?

        /// Read now through the state folder, each checked as a private
        /// file of the user's (-shm too: SQLite opens it by name). Nil when
        /// there is no ledger.
        static func now(in state: StateDirectory) throws(GrantError) -> Files? {
            let shown = state.path + "/" + Ledger.fileName
            guard let ledger = try StateDirectory.statPrivateFile(Ledger.fileName, in: state.descriptor, path: shown) else { return nil }
            let wal = try StateDirectory.statPrivateFile(Ledger.fileName + "-wal", in: state.descriptor, path: shown + "-wal")
            _ = try StateDirectory.statPrivateFile(Ledger.fileName + "-shm", in: state.descriptor, path: shown + "-shm")
            return Files(ledger: FileStatus(ledger), wal: wal.map { FileStatus($0, changeTime: false) })
        }
    }

    /// The ledger's files when the records were read.
    var files: Files
    /// Live grants, the newest last.
    var records: [GrantRecord]

    func record(_ id: GrantID) -> GrantRecord? {
        records.last { $0.id == id }
    }

    /// This cache with `record` added (the oldest dropped beyond `capacity`).
    func adding(_ record: GrantRecord) -> LedgerCache {
        var kept = records.filter { $0.id != record.id }
        kept.append(record)
        return LedgerCache(files: files, records: Array(kept.suffix(Self.capacity)))
    }

    // MARK: The file

    /// The cache, when there is one sealed with `key`; nil when there is
    /// none, or it is not authentic or not understood (then it is ignored,
    /// and replaced by the next launch that reads the ledger). Throws when
    /// the file is untrusted, as any file of the state.
    static func read(from state: StateDirectory, keyID: [UInt8], key: SymmetricKey) throws(GrantError) -> LedgerCache? {
        let path = state.path + "/" + fileName
        guard let file = try StateDirectory.openPrivateFile(fileName, in: state.descriptor, path: path) else { return nil }
        let bytes: [UInt8]
        do { bytes = try StateDirectory.readAll(file.descriptor, limit: sizeLimit) } catch .fileTooLarge {
            return nil
        } catch {
            throw .stateDirectory(step: "reading \(path)", errno: error)
        }
        return try? open(bytes, keyID: keyID, key: key)
    }

    /// Writes the cache, sealed with `key`, in place of any other. Not
    /// synced: lost, it costs one read of the ledger. Call under the state's
    /// shared lock, with records read from the ledger under it. A state the
    /// user may not write (read-only) keeps no cache.
    func write(to state: StateDirectory, keyID: [UInt8], key: SymmetricKey) {
        guard let blob = try? seal(keyID: keyID, key: key) else { return }
        try? AtomicFile.replace(Self.fileName, in: state.descriptor, with: blob, mode: 0o600, durable: false)
    }

    /// Removes the cache before the ledger changes: the removal is synced,
    /// so no crash brings back a cache older than the change. Call under the
    /// state's exclusive lock.
    static func remove(from state: StateDirectory) throws(GrantError) {
        guard unlinkat(state.descriptor.rawValue, fileName, 0) == 0 else {
            let code = errno
            if code == ENOENT { return }
            throw code == EROFS || code == EACCES || code == EPERM
                ? .readOnlyState(path: state.path, needed: "this command")
                : .stateDirectory(step: "removing \(state.path)/\(fileName)", errno: Errno(rawValue: code))
        }
        do { try AtomicFile.syncFolder(state.descriptor) } catch {
            throw .stateDirectory(step: "syncing \(state.path)", errno: error)
        }
    }

    // MARK: Encoding

    static func header(keyID: [UInt8]) -> [UInt8] {
        magic + [version] + keyID
    }

    func seal(keyID: [UInt8], key: SymmetricKey) throws -> [UInt8] {
        let header = Self.header(keyID: keyID)
        let box = try ChaChaPoly.seal(encodedPayload(), using: key, authenticating: header)
        return header + Array(box.combined)
    }

    /// Nil for a cache sealed with another key; throws for one that is not authentic or malformed.
    static func open(_ blob: [UInt8], keyID: [UInt8], key: SymmetricKey) throws -> LedgerCache? {
        var reader = ByteReader(blob)
        guard try reader.bytes(4) == magic, try reader.byte() == version else { throw Bookmark.OpenError.malformed("not a ledger cache") }
        guard try reader.bytes(8) == keyID else { return nil }
        let headerLength = reader.offset
        let box = try ChaChaPoly.SealedBox(combined: reader.rest())
        let payload = Array(try ChaChaPoly.open(box, using: key, authenticating: blob[0..<headerLength]))
        return try decodePayload(payload)
    }

    private func encodedPayload() -> [UInt8] {
        var writer = ByteWriter()
        func status(_ status: FileStatus) {
            writer.integer(status.device)
            writer.integer(status.inode)
            writer.integer(status.size)
            writer.integer(status.modified)
            writer.integer(status.modifiedNanoseconds)
            writer.integer(status.changed)
            writer.integer(status.changedNanoseconds)
        }
        status(files.ledger)
        writer.byte(files.wal == nil ? 0 : 1)
        if let wal = files.wal { status(wal) }
        writer.byte(UInt8(records.count))
        for record in records {
            writer.bytes(record.id.digest)
            writer.byte(UInt8(record.app.utf8.count))
            writer.bytes(Array(record.app.utf8))
            writer.byte(record.access == .readWrite ? 1 : 0)
            let path = record.path.bytes
            writer.integer(UInt16(path.count))
            writer.bytes(path)
            writer.byte(UInt8(record.handle.count))
            writer.bytes(record.handle)
            writer.integer(record.created)
        }
        return writer.output
    }

    private static func decodePayload(_ payload: [UInt8]) throws -> LedgerCache {
        var reader = ByteReader(payload)
        func status() throws -> FileStatus {
            FileStatus(
                device: try reader.integer(), inode: try reader.integer(), size: try reader.integer(), modified: try reader.integer(),
                modifiedNanoseconds: try reader.integer(), changed: try reader.integer(), changedNanoseconds: try reader.integer())
        }
        let ledger = try status()
        let wal = try reader.byte() == 1 ? try status() : nil
        let count = Int(try reader.byte())
        var records: [GrantRecord] = []
        for _ in 0..<count {
            let id = GrantID(digest: try reader.bytes(32))
            let app = String(decoding: try reader.bytes(Int(try reader.byte())), as: UTF8.self)
            let access: GrantAccess = try reader.byte() == 1 ? .readWrite : .readOnly
            let pathLength: UInt16 = try reader.integer()
            let path = FilePath(bytes: try reader.bytes(Int(pathLength)))
            let handle = try reader.bytes(Int(try reader.byte()))
            let created: Int64 = try reader.integer()
            records.append(GrantRecord(id: id, app: app, access: access, path: path, handle: handle, created: created, revoked: nil, pending: nil))
        }
        guard reader.isAtEnd else { throw Bookmark.OpenError.malformed("trailing bytes") }
        return LedgerCache(files: Files(ledger: ledger, wal: wal), records: records)
    }
}
