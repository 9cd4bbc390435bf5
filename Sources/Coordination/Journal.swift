@preconcurrency import Glibc
import CSandbox
import Sandbox
import SystemPackage

/// Crash safety for appended records. A `write(2)` that stays within one
/// 4 KiB page of the file is whole or absent when its writer is killed (the
/// kernel checks for a fatal signal only between page-cache chunks). A
/// record that crosses a page boundary is first described in
/// `.NAME.sr-journal` (its offset, length and bytes); the next party that
/// holds the item exclusively finds the journal and, if the file ends with a
/// torn prefix of exactly that record, truncates it away: the record never
/// landed, and its writer never reported that it had.
enum Journal {
    static let page: Int64 = 4096
    static let magic = Array("sandboxed-run journal 1\n".utf8)
    /// Records are lines; a journal larger than this is not ours.
    static let largest = 1 << 20

    static func exists(in folder: OwnedDescriptor, for name: [CChar]) -> Bool {
        var status = stat()
        return fstatat(folder.rawValue, FileCoordinator.sibling(of: name, suffix: ".sr-journal"), &status, AT_SYMLINK_NOFOLLOW) == 0
    }

    /// Writes `data` at the end (`size`), journaled when it crosses a page;
    /// on a short write (ENOSPC) the file is cut back to `size`.
    static func append(_ data: [UInt8], at size: Int64, to fd: CInt, path: FilePath, folder: OwnedDescriptor, name: [CChar]) throws {
        let journalName = FileCoordinator.sibling(of: name, suffix: ".sr-journal")
        let crossesPage = size % page + Int64(data.count) > page
        if crossesPage {
            // Written under another name, then renamed into place: a writer
            // killed while writing it leaves no journal (and had written no
            // record yet), never a torn journal that would stop every later writer.
            let stagedName = FileCoordinator.sibling(of: name, suffix: ".sr-journal.new")
            let fd = csb_open_regular(folder.rawValue, stagedName, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            guard fd >= 0 else { throw CoordinationError.system(operation: "writing the journal of", path: path, errno: Errno(rawValue: errno)) }
            let journal = OwnedDescriptor(taking: fd)
            try FileCoordinator.writeAll(magic + Array("\(size) \(data.count)\n".utf8) + data, to: journal.rawValue, path: path)
            guard renameat(folder.rawValue, stagedName, folder.rawValue, journalName) == 0 else {
                throw CoordinationError.system(operation: "writing the journal of", path: path, errno: Errno(rawValue: errno))
            }
        }
        do {
            try FileCoordinator.writeAll(data, to: fd, path: path)
        } catch {
            _ = ftruncate(fd, off_t(size))  // nothing half-written
            if crossesPage { _ = unlinkat(folder.rawValue, journalName, 0) }
            throw error
        }
        if crossesPage { _ = unlinkat(folder.rawValue, journalName, 0) }
    }

    /// Rolls back a torn record that the journal describes, then removes the
    /// journal. The caller holds the item exclusively.
    static func recover(in folder: OwnedDescriptor, for name: [CChar], item: OwnedDescriptor, path: FilePath) throws {
        let journalName = FileCoordinator.sibling(of: name, suffix: ".sr-journal")
        let journalPath = path.removingLastComponent().pushing(FileCoordinator.display(journalName))
        _ = unlinkat(folder.rawValue, FileCoordinator.sibling(of: name, suffix: ".sr-journal.new"), 0)  // a killed writer's, never in use now
        let fd = csb_open_regular(folder.rawValue, journalName, O_RDONLY, 0)
        if fd < 0 {
            if errno == ENOENT { return }
            throw CoordinationError.damagedJournal(journalPath)
        }
        let journal = OwnedDescriptor(taking: fd)
        guard let status = try? journal.status(), status.st_size <= largest + 64 else { throw CoordinationError.damagedJournal(journalPath) }
        var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
        let count = bytes.withUnsafeMutableBytes { pread(journal.rawValue, $0.baseAddress, $0.count, 0) }
        guard count == bytes.count, bytes.starts(with: magic),
              let newline = bytes[magic.count...].firstIndex(of: UInt8(ascii: "\n")) else { throw CoordinationError.damagedJournal(journalPath) }
        let header = String(decoding: bytes[magic.count..<newline], as: UTF8.self).split(separator: " ")
        let record = Array(bytes[(newline + 1)...])
        guard header.count == 2, let offset = Int64(header[0]), let length = Int(header[1]), offset >= 0, length == record.count else {
            throw CoordinationError.damagedJournal(journalPath)
        }
        let size = Int64(try item.status().st_size)
        if size > offset, size < offset + Int64(length) {
            // Only if what follows `offset` is a prefix of that very record: never cut what someone else wrote.
            var tail = [UInt8](repeating: 0, count: Int(size - offset))
            let read = tail.withUnsafeMutableBytes { pread(item.rawValue, $0.baseAddress, $0.count, off_t(offset)) }
            if read == tail.count, record.starts(with: tail) {
                guard ftruncate(item.rawValue, off_t(offset)) == 0 else {
                    throw CoordinationError.system(operation: "rolling back a torn record in", path: path, errno: Errno(rawValue: errno))
                }
            }
        }
        _ = unlinkat(folder.rawValue, journalName, 0)
    }
}
