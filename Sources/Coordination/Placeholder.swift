@preconcurrency import Glibc
import CSyscalls
@_spi(Fuzzing) import PropertyLists
import SystemKit
import SystemPackage

/// A file evicted by a sync service, as iCloud Drive shows one on a Mac:
/// `NAME` is gone and a small stub `.NAME.icloud` stands in its place (for
/// a name too long for that, `.sr2-<hash>.icloud`: see `ItemNames`). The
/// stub is a binary property list with `NSURLNameKey` (the name) and
/// `NSURLFileSizeKey` (the size), as Apple's, and this protocol's version
/// and the name's bytes. Our sync simulator keeps the evicted file itself
/// beside it as `.NAME.icloud.data` (its "server" copy, renamed there, so
/// it keeps its inode, owner and mode), so a simulator that dies loses nothing.
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
        /// The protocol version of the party that wrote it (1 when the stub does not say).
        public let version: Int
        /// The item's owner (uid) when it was evicted, when the stub says: only
        /// a copy of that owner's is brought back in its place.
        public let owner: UInt32?

        public init(name: FilePath, size: Int, version: Int = ItemNames.protocolVersion, owner: UInt32? = nil) {
            self.name = name
            self.size = size
            self.version = version
            self.owner = owner
        }
    }

    /// The stub's key for the protocol version (version 1 wrote none).
    static let versionKey = "SRCoordinationProtocolVersion"
    /// The item's name as hex digits of its bytes: NSURLNameKey is a string,
    /// which a name that is not UTF-8 cannot be.
    static let nameBytesKey = "SRItemNameBytes"
    /// The evicted item's owner (uid): what its copy must be owned by to come back.
    static let ownerKey = "SRItemOwner"
    /// Stubs are a few hundred bytes; a larger one is not ours.
    static let largestStub = 4096

    public static func status(of path: FilePath) throws -> DownloadingStatus {
        try status(of: FileCoordinator.Location(path))
    }

    public static func status(of location: FileCoordinator.Location) throws -> DownloadingStatus {
        let (folder, name) = (location.folder, location.name)
        var status = stat()
        let present = fstatat(folder.rawValue, name, &status, AT_SYMLINK_NOFOLLOW) == 0
        let stub = fstatat(folder.rawValue, ItemNames.sibling(.placeholder, of: name), &status, AT_SYMLINK_NOFOLLOW) == 0
        if !present, !stub { try refuseIfOtherVersion(location) }
        return present ? (stub ? .downloaded : .current) : (stub ? .notDownloaded : .current)
    }

    /// Asks the sync daemon for `path` (creates its download request).
    public static func requestDownload(of path: FilePath) throws {
        try requestDownload(of: FileCoordinator.Location(path))
    }

    public static func requestDownload(of location: FileCoordinator.Location) throws {
        let (folder, path) = (location.folder, location.path)
        let marker = ItemNames.sibling(.download, of: location.name)
        let fd = openat(folder.rawValue, marker, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CoordinationError.system(operation: "requesting the download of", path: path, errno: Errno(rawValue: errno)) }
        close(fd)
    }

    /// Requests the download and waits until `path` is on disk.
    public static func download(_ path: FilePath, timeout: Duration) throws {
        try download(FileCoordinator.Location(path), timeout: timeout)
    }

    public static func download(_ location: FileCoordinator.Location, timeout: Duration) throws {
        try download(location, until: ContinuousClock.now + timeout)
    }

    static func download(_ location: FileCoordinator.Location, until deadline: ContinuousClock.Instant) throws {
        guard try status(of: location) == .notDownloaded else { return }
        try requestDownload(of: location)
        while try status(of: location) == .notDownloaded {
            if ContinuousClock.now >= deadline { throw CoordinationError.placeholder(location.path) }
            usleep(10_000)
        }
    }

    /// Refuses to create the item when its placeholder exists: the new file
    /// would stand beside the evicted one, and one of them would be lost or
    /// become a conflict. Anything at the stub's name counts (a folder, a link).
    static func refuseIfEvicted(_ location: FileCoordinator.Location) throws {
        var status = stat()
        if fstatat(location.folder.rawValue, ItemNames.sibling(.placeholder, of: location.name), &status, AT_SYMLINK_NOFOLLOW) == 0 {
            throw CoordinationError.placeholder(location.path)
        }
        try refuseIfOtherVersion(location)
    }

    /// A version 1 party named the stub `.NAME.icloud` whatever NAME's length;
    /// version 2 hashes long names. Such a stub is a version 1 eviction that
    /// version 2 would otherwise not see.
    static func refuseIfOtherVersion(_ location: FileCoordinator.Location) throws {
        guard let old = ItemNames.versionOneSibling(.placeholder, of: location.name) else { return }
        var status = stat()
        if fstatat(location.folder.rawValue, old, &status, AT_SYMLINK_NOFOLLOW) == 0 {
            throw CoordinationError.otherProtocolVersion(location.named(old).path, version: 1)
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
        var pairs: [([UInt8], [UInt8])] = [
            (string(Array("NSURLNameKey".utf8)), string(stub.name.bytes)),
            (string(Array("NSURLFileSizeKey".utf8)), integer(stub.size)),
            (string(Array(versionKey.utf8)), integer(stub.version)),
            (string(Array(nameBytesKey.utf8)), string(stub.name.bytes.flatMap { ItemNames.hexDigits($0) })),
        ]
        if let owner = stub.owner { pairs.append((string(Array(ownerKey.utf8)), integer(Int(owner)))) }
        // A dictionary of n: n key references, then n value references (one byte each).
        let n = pairs.count
        let dictionary = [0xD0 | UInt8(n)] + (1...2 * n).map { UInt8($0) }
        let objects = [dictionary] + pairs.map(\.0) + pairs.map(\.1)
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
        var version = 1
        if let entry = entries[versionKey] {
            guard case .integer(let number) = entry, number > 0, number < 1_000_000 else { throw CoordinationError.damagedPlaceholder(path) }
            version = Int(number)
        }
        var bytes = Array(name.utf8)
        if let entry = entries[nameBytesKey] {
            guard case .string(let hex) = entry, let decoded = Printable.bytes(hex: hex), !decoded.isEmpty, !decoded.contains(0),
                  !decoded.contains(UInt8(ascii: "/")), decoded.count <= ItemNames.nameMax else { throw CoordinationError.damagedPlaceholder(path) }
            bytes = decoded
        }
        var owner: UInt32?
        if let entry = entries[ownerKey] {
            guard case .integer(let number) = entry, number >= 0, number <= Int64(UInt32.max) else { throw CoordinationError.damagedPlaceholder(path) }
            owner = UInt32(number)
        }
        return Stub(name: FilePath(bytes: bytes), size: size, version: version, owner: owner)
    }

    /// Reads the stub beside `location` and checks that it is this
    /// version's and names this item: what the daemon needs before it acts.
    static func read(for location: FileCoordinator.Location) throws -> Stub {
        let stub = location.sibling(.placeholder)
        let fd = csb_open_regular(location.folder.rawValue, stub.name, O_RDONLY, 0)
        guard fd >= 0 else { throw CoordinationError.damagedPlaceholder(stub.path) }
        let bytes = try FileVersion.readAll(OwnedDescriptor(taking: fd), path: stub.path, limit: largestStub)
        let decoded = try decode(bytes, path: stub.path)
        guard decoded.version == ItemNames.protocolVersion else { throw CoordinationError.otherProtocolVersion(stub.path, version: decoded.version) }
        guard matches(decoded, ItemNames.bytes(location.name)) else { throw CoordinationError.damagedPlaceholder(stub.path) }
        return decoded
    }

    static func matches(_ stub: Stub, _ name: [UInt8]) -> Bool { stub.name.bytes == name }
}
