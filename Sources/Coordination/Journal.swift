@preconcurrency import Glibc
import CSyscalls
import SystemKit
import SystemPackage

/// Crash safety for appended records. A `write(2)` that stays within one
/// 4 KiB page of the file is whole or absent when its writer is killed (the
/// kernel checks for a fatal signal only between page-cache chunks). A
/// record that crosses a page boundary is first described in the item's
/// journal (its offset, length and bytes), flushed before the record is
/// written; the next party that holds the item exclusively finds the
/// journal and, if the file ends with a torn prefix of exactly that record,
/// truncates it away: the record never landed, and its writer never
/// reported that it had.
enum Journal {
    static let page: Int64 = 4096
    static let magicPrefix = Array("sandboxed-run journal ".utf8)
    static let magic = magicPrefix + Array("\(ItemNames.protocolVersion)\n".utf8)
    /// Records are lines; a journal larger than this is not ours.
    static let largest = 1 << 20

    static func exists(for location: FileCoordinator.Location) -> Bool {
        var status = stat()
        if fstatat(location.folder.rawValue, ItemNames.sibling(.journal, of: location.name), &status, AT_SYMLINK_NOFOLLOW) == 0 { return true }
        // A version 1 writer's journal under the long name: recovery refuses it.
        guard let old = ItemNames.versionOneSibling(.journal, of: location.name) else { return false }
        return fstatat(location.folder.rawValue, old, &status, AT_SYMLINK_NOFOLLOW) == 0
    }

    /// Writes `data` at the end (`size`), journaled when it crosses a page;
    /// on a failed write the file is cut back to `size`. A journaled record
    /// is flushed before its journal goes (returns true); one within a page
    /// is whole or absent whatever happens, and the caller flushes it.
    static func append(_ data: [UInt8], at size: Int64, to fd: CInt, for location: FileCoordinator.Location) throws -> Bool {
        let (folder, path) = (location.folder, location.path)
        let journal = location.sibling(.journal)
        let crossesPage = size % page + Int64(data.count) > page
        if crossesPage {
            // Written under another name, flushed, then renamed into place and
            // the folder flushed: a writer killed (or a machine losing power)
            // while writing it leaves no journal (and no record yet), never a
            // torn journal that would stop every later writer, and the record
            // is never on disk without the journal that can take it back.
            let staged = location.sibling(.stagedJournal)
            var item = stat()
            guard fstat(fd, &item) == 0 else { throw CoordinationError.system(operation: "fstat", path: path, errno: Errno(rawValue: errno)) }
            let stagedFile = try create(staged, like: item, path: path)
            try FileCoordinator.writeAll(magic + Array("\(size) \(data.count)\n".utf8) + data, to: stagedFile.rawValue, path: staged.path)
            try Durably.sync(stagedFile.rawValue, path: staged.path)
            do { _ = try syscallRetrying { renameat(folder.rawValue, staged.name, folder.rawValue, journal.name) } } catch {
                throw CoordinationError.system(operation: "writing the journal of", path: path, errno: error)
            }
            try Durably.syncFolder(folder, path: path)
        }
        do {
            try FileCoordinator.writeAll(data, to: fd, path: path)
            // Flushed before the journal goes: without its journal a torn record could not be taken back.
            if crossesPage { try Durably.sync(fd, path: path) }
        } catch {
            _ = ftruncate(fd, off_t(size))  // nothing half-written
            _ = fsync(fd)
            if crossesPage { _ = unlinkat(folder.rawValue, journal.name, 0) }
            throw error
        }
        if crossesPage { _ = unlinkat(folder.rawValue, journal.name, 0) }
        return crossesPage
    }

    /// The staged journal, new (`O_EXCL`: never a file someone else made
    /// and may still hold open), 0600 whatever the folder's default ACL,
    /// and given the item's owner when this process may, so that the
    /// item's owner can recover it if this process dies. A file already
    /// there was left by a killed writer, or put there by a party outside
    /// the protocol (no writer makes one without the item's write lock,
    /// which this process holds): removed if its owner could write the item,
    /// refused otherwise.
    private static func create(_ staged: FileCoordinator.Location, like item: stat, path: FilePath) throws -> OwnedDescriptor {
        for _ in 0..<3 {
            let fd = csb_open_regular(staged.folder.rawValue, staged.name, O_WRONLY | O_CREAT | O_EXCL, 0o600)
            if fd >= 0 {
                let file = OwnedDescriptor(taking: fd)
                _ = AccessControl.removeInherited(from: fd, folder: false)  // made 0600: an inherited ACL is masked to nothing anyway
                if item.st_uid != geteuid() || item.st_gid != getegid() { _ = fchown(fd, item.st_uid, item.st_gid) }
                return file
            }
            guard errno == EEXIST else {
                throw CoordinationError.system(operation: "writing the journal of", path: path, errno: Errno(rawValue: errno))
            }
            try Trust.check(staged, item: item, ownerOnly: true)
            _ = unlinkat(staged.folder.rawValue, staged.name, 0)
        }
        throw CoordinationError.system(operation: "writing the journal of", path: path, errno: .fileExists)
    }

    /// Rolls back a torn record that the journal describes, then removes the
    /// journal. The caller holds the item exclusively. A journal of another
    /// protocol version is refused, never read as this one's, and so is one
    /// that someone who may not write the item could have written (another
    /// user, in a folder others may create names in): it could describe the
    /// whole file as a torn record.
    static func recover(for location: FileCoordinator.Location, item: OwnedDescriptor) throws {
        let (folder, path) = (location.folder, location.path)
        let journal = location.sibling(.journal)
        func itemStatus() throws -> stat {
            do { return try item.status() } catch { throw CoordinationError.system(operation: "fstat", path: path, errno: error) }
        }
        // A killed writer's, never in use now (its writer held the lock we hold): removed, if it is a writer's.
        let staged = location.sibling(.stagedJournal)
        var leftover = stat()
        if fstatat(folder.rawValue, staged.name, &leftover, AT_SYMLINK_NOFOLLOW) == 0 {
            if let problem = Trust.problem(with: leftover, item: try itemStatus(), ownerOnly: true) {
                throw CoordinationError.untrusted(staged.path, problem: problem)
            }
            _ = unlinkat(folder.rawValue, staged.name, 0)
        }
        if let old = ItemNames.versionOneSibling(.journal, of: location.name) {
            var status = stat()
            if fstatat(folder.rawValue, old, &status, AT_SYMLINK_NOFOLLOW) == 0 {
                throw CoordinationError.otherProtocolVersion(location.named(old).path, version: 1)
            }
        }
        let fd = csb_open_regular(folder.rawValue, journal.name, O_RDONLY, 0)
        if fd < 0 {
            if errno == ENOENT { return }
            throw CoordinationError.damagedJournal(journal.path)
        }
        let file = OwnedDescriptor(taking: fd)
        guard let status = try? file.status() else { throw CoordinationError.damagedJournal(journal.path) }
        let current = try itemStatus()
        if let problem = Trust.problem(with: status, item: current, ownerOnly: true) {
            throw CoordinationError.untrusted(journal.path, problem: problem)
        }
        guard status.st_size <= largest + 64 else { throw CoordinationError.damagedJournal(journal.path) }
        var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
        let count = bytes.withUnsafeMutableBytes { pread(file.rawValue, $0.baseAddress, $0.count, 0) }
        guard count == bytes.count else { throw CoordinationError.damagedJournal(journal.path) }
        if !bytes.starts(with: magic) {
            if let version = otherVersion(bytes) { throw CoordinationError.otherProtocolVersion(journal.path, version: version) }
            throw CoordinationError.damagedJournal(journal.path)
        }
        guard let newline = bytes[magic.count...].firstIndex(of: UInt8(ascii: "\n")) else { throw CoordinationError.damagedJournal(journal.path) }
        let header = String(decoding: bytes[magic.count..<newline], as: UTF8.self).split(separator: " ")
        let record = Array(bytes[(newline + 1)...])
        guard header.count == 2, let offset = Int64(header[0]), let length = Int(header[1]), offset >= 0, length == record.count else {
            throw CoordinationError.damagedJournal(journal.path)
        }
        let size = Int64(current.st_size)
        if size > offset, size < offset + Int64(length) {
            // Only if what follows `offset` is a prefix of that very record: never cut what someone else wrote.
            var tail = [UInt8](repeating: 0, count: Int(size - offset))
            let read = tail.withUnsafeMutableBytes { pread(item.rawValue, $0.baseAddress, $0.count, off_t(offset)) }
            if read == tail.count, record.starts(with: tail) {
                guard ftruncate(item.rawValue, off_t(offset)) == 0 else {
                    throw CoordinationError.system(operation: "rolling back a torn record in", path: path, errno: Errno(rawValue: errno))
                }
                try Durably.sync(item.rawValue, path: path)
            }
        }
        _ = unlinkat(folder.rawValue, journal.name, 0)
    }

    /// The version a journal of another version of this protocol names in its magic line.
    private static func otherVersion(_ bytes: [UInt8]) -> Int? {
        guard bytes.starts(with: magicPrefix), let newline = bytes.firstIndex(of: UInt8(ascii: "\n")), newline - magicPrefix.count <= 6 else { return nil }
        return Int(String(decoding: bytes[magicPrefix.count..<newline], as: UTF8.self))
    }
}
