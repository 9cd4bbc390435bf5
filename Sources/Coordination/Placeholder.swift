@preconcurrency import Glibc
@_spi(Fuzzing) import Sandbox
import SystemPackage

/// A file evicted by a sync service, as iCloud Drive shows one on a Mac:
/// `NAME` is gone and a small stub `.NAME.icloud` stands in its place. The
/// stub is a binary property list with `NSURLNameKey` (the name) and
/// `NSURLFileSizeKey` (the size), as Apple's. Our sync simulator keeps the
/// evicted bytes beside it in `.NAME.icloud.data` (its "server" copy), so a
/// simulator that dies loses nothing.
///
/// A confined writer has no socket to the daemon, so it asks for the file by
/// creating `.NAME.icloud.download` (an empty file) in the same folder; the
/// daemon materialises the file and removes both.
public enum Placeholder {
    /// NSURLUbiquitousItemDownloadingStatus.
    public enum DownloadingStatus: String, Sendable {
        /// The file is on disk, and no newer version waits on the server.
        case current
        /// The file is on disk, but a newer version waits (a stub beside it).
        case downloaded
        /// Only the placeholder is on disk.
        case notDownloaded
    }

    public struct Stub: Equatable, Sendable {
        public let name: FilePath
        public let size: Int
    }

    public static func status(of path: FilePath) throws -> DownloadingStatus {
        try status(of: FileCoordinator.Location(path))
    }

    public static func status(of location: FileCoordinator.Location) throws -> DownloadingStatus {
        let (folder, name) = (location.folder, location.name)
        var status = stat()
        let present = fstatat(folder.rawValue, name, &status, AT_SYMLINK_NOFOLLOW) == 0
        let stub = fstatat(folder.rawValue, FileCoordinator.sibling(of: name, suffix: ".icloud"), &status, AT_SYMLINK_NOFOLLOW) == 0
        return present ? (stub ? .downloaded : .current) : (stub ? .notDownloaded : .current)
    }

    /// Asks the sync daemon for `path` (creates `.NAME.icloud.download`).
    public static func requestDownload(of path: FilePath) throws {
        try requestDownload(of: FileCoordinator.Location(path))
    }

    public static func requestDownload(of location: FileCoordinator.Location) throws {
        let (folder, path) = (location.folder, location.path)
        let marker = FileCoordinator.sibling(of: location.name, suffix: ".icloud.download")
        let fd = openat(folder.rawValue, marker, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw CoordinationError.system(operation: "requesting the download of", path: path, errno: Errno(rawValue: errno)) }
        close(fd)
    }

    /// Requests the download and waits until `path` is on disk.
    public static func download(_ path: FilePath, timeout: Duration) throws {
        try download(FileCoordinator.Location(path), timeout: timeout)
    }

    public static func download(_ location: FileCoordinator.Location, timeout: Duration) throws {
        guard try status(of: location) == .notDownloaded else { return }
        try requestDownload(of: location)
        let deadline = ContinuousClock.now + timeout
        while try status(of: location) == .notDownloaded {
            if ContinuousClock.now >= deadline { throw CoordinationError.placeholder(location.path) }
            usleep(10_000)
        }
    }

    /// Refuses to write `name` when only its placeholder exists: writing
    /// would make a new file that the download then conflicts with.
    static func refuseIfEvicted(_ name: [CChar], in folder: OwnedDescriptor, path: FilePath) throws {
        var status = stat()
        guard fstatat(folder.rawValue, name, &status, AT_SYMLINK_NOFOLLOW) != 0, errno == ENOENT else { return }
        if fstatat(folder.rawValue, FileCoordinator.sibling(of: name, suffix: ".icloud"), &status, AT_SYMLINK_NOFOLLOW) == 0 {
            throw CoordinationError.placeholder(path)
        }
    }

    // MARK: The stub's format

    /// A binary property list (bplist00) of one dictionary.
    public static func encode(_ stub: Stub) -> [UInt8] {
        func string(_ text: [UInt8]) -> [UInt8] {
            let ascii = text.allSatisfy { $0 < 0x80 }
            let units: [UInt8] = ascii ? text : String(decoding: text, as: UTF8.self).utf16.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xff)] }
            let count = ascii ? units.count : units.count / 2
            let marker: UInt8 = ascii ? 0x50 : 0x60
            return (count < 15 ? [marker | UInt8(count)] : [marker | 0x0f] + integer(count)) + units
        }
        func integer(_ value: Int) -> [UInt8] { [0x13] + (0..<8).reversed().map { UInt8(truncatingIfNeeded: UInt64(value) >> (8 * UInt64($0))) } }
        let objects: [[UInt8]] = [
            [0xD2, 1, 2, 3, 4],  // a dictionary of two: key refs 1, 2; value refs 3, 4
            string(Array("NSURLNameKey".utf8)), string(Array("NSURLFileSizeKey".utf8)),
            string(stub.name.bytes), integer(stub.size),
        ]
        var bytes = Array("bplist00".utf8)
        var offsets: [Int] = []
        for object in objects {
            offsets.append(bytes.count)
            bytes += object
        }
        let table = bytes.count
        for offset in offsets { bytes += [UInt8(offset >> 8), UInt8(offset & 0xff)] }
        bytes += [0, 0, 0, 0, 0, 0, 2, 1]  // offsets of 2 bytes, references of 1
        for value in [objects.count, 0, table] { bytes += (0..<8).reversed().map { UInt8(truncatingIfNeeded: UInt64(value) >> (8 * UInt64($0))) } }
        return bytes
    }

    /// Reads a stub with the project's bounded reader: a hostile stub is an error, never a crash or a hang.
    public static func decode(_ bytes: [UInt8], path: FilePath) throws -> Stub {
        guard let entries = try? PropertyListReader.read(bytes, source: Printable.path(path)),
              case .string(let name)? = entries["NSURLNameKey"], case .integer(let size)? = entries["NSURLFileSizeKey"],
              size >= 0, !name.isEmpty, !name.contains("/") else {
            throw CoordinationError.damagedPlaceholder(path)
        }
        return Stub(name: FilePath(name), size: size)
    }
}
