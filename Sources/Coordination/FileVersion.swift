@preconcurrency import Glibc
import CSandbox
import Sandbox
import SystemPackage

/// A conflict version, as NSFileVersion exposes them: when two sides changed
/// a file concurrently, the losing side's contents are kept beside it, in
/// `D/.sandboxed-run-versions/NAME/SECONDS.NANOSECONDS-COMPUTER`, named by
/// the modification time they had and the side that saved them.
public struct FileVersion: Equatable, Sendable {
    /// The file this is a version of.
    public let item: FilePath
    /// The version's file name: `SECONDS.NANOSECONDS-COMPUTER`.
    public let identifier: String
    /// When its side last changed it (for last-writer-wins).
    public let modified: timespec
    /// The side that saved it (`localizedNameOfSavingComputer`).
    public let savingComputer: String

    public static func == (a: FileVersion, b: FileVersion) -> Bool { a.item == b.item && a.identifier == b.identifier }

    static let folderName = ".sandboxed-run-versions"
    /// Versions are whole files read into memory: larger ones are refused.
    static let largest = 64 << 20

    /// The unresolved conflict versions of `item`, oldest first. Entries that
    /// are not versions (a link, a FIFO, a name of another form) are skipped.
    public static func unresolvedConflictVersions(of item: FilePath) throws -> [FileVersion] {
        try unresolvedConflictVersions(of: FileCoordinator.Location(item))
    }

    public static func unresolvedConflictVersions(of location: FileCoordinator.Location) throws -> [FileVersion] {
        let item = location.path
        guard let folder = try versionsFolder(of: location, create: false) else { return [] }
        guard let stream = fdopendir(dup(folder.rawValue)) else { return [] }
        defer { closedir(stream) }
        var versions: [FileVersion] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            guard entry.pointee.d_type == DT_REG, let version = parse(name, item: item) else { continue }
            versions.append(version)
        }
        return versions.sorted { ($0.modified.tv_sec, $0.modified.tv_nsec) < ($1.modified.tv_sec, $1.modified.tv_nsec) }
    }

    /// Keeps `contents` as a conflict version of `item`.
    @discardableResult
    public static func add(to item: FilePath, contents: [UInt8], modified: timespec, savingComputer: String) throws -> FileVersion {
        try add(to: FileCoordinator.Location(item), contents: contents, modified: modified, savingComputer: savingComputer)
    }

    @discardableResult
    public static func add(to location: FileCoordinator.Location, contents: [UInt8], modified: timespec, savingComputer: String) throws -> FileVersion {
        let item = location.path
        let computer = String(savingComputer.filter { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }.prefix(32))
        let identifier = "\(modified.tv_sec).\(String(modified.tv_nsec + 1_000_000_000).dropFirst())-\(computer.isEmpty ? "unknown" : computer)"
        guard let folder = try versionsFolder(of: location, create: true) else { throw CoordinationError.notARegularFile(item) }
        let fd = csb_open_regular(folder.rawValue, identifier, O_WRONLY | O_CREAT | O_EXCL, 0o644)
        guard fd >= 0 else { throw CoordinationError.system(operation: "keeping a conflict version of", path: item, errno: Errno(rawValue: errno)) }
        let file = OwnedDescriptor(taking: fd)
        try FileCoordinator.writeAll(contents, to: file.rawValue, path: item)
        return FileVersion(item: item, identifier: identifier, modified: modified, savingComputer: computer)
    }

    /// The version's bytes.
    public func contents() throws -> [UInt8] {
        try contents(at: FileCoordinator.Location(item))
    }

    /// The version's bytes, for the item at `location`.
    public func contents(at location: FileCoordinator.Location) throws -> [UInt8] {
        guard let folder = try Self.versionsFolder(of: location, create: false) else { throw CoordinationError.noSuchVersion(item, identifier) }
        let fd = csb_open_regular(folder.rawValue, identifier, O_RDONLY, 0)
        guard fd >= 0 else { throw CoordinationError.noSuchVersion(item, identifier) }
        return try Self.readAll(OwnedDescriptor(taking: fd), path: item)
    }

    /// Which contents survive a resolution.
    public enum Choice: Sendable, Equatable {
        /// The file as it is.
        case current
        /// This version replaces the file.
        case version(String)
        /// Last writer wins, by modification time: the file or the newest version.
        case newest
    }

    /// Resolves `item`'s conflict: the chosen contents stay (replacing the
    /// file, coordinated), every conflict version is removed. Returns what was kept.
    @discardableResult
    public static func resolve(_ item: FilePath, keeping choice: Choice = .newest, coordinator: FileCoordinator = FileCoordinator()) throws -> Choice {
        try resolve(FileCoordinator.Location(item), keeping: choice, coordinator: coordinator)
    }

    @discardableResult
    public static func resolve(_ location: FileCoordinator.Location, keeping choice: Choice = .newest, coordinator: FileCoordinator = FileCoordinator()) throws -> Choice {
        let item = location.path
        let versions = try unresolvedConflictVersions(of: location)
        var kept = choice
        if choice == .newest {
            var status = stat()
            let current = fstatat(location.folder.rawValue, location.name, &status, AT_SYMLINK_NOFOLLOW) == 0 ? status.st_mtim : timespec(tv_sec: 0, tv_nsec: 0)
            if let newest = versions.last, (newest.modified.tv_sec, newest.modified.tv_nsec) > (current.tv_sec, current.tv_nsec) {
                kept = .version(newest.identifier)
            } else {
                kept = .current
            }
        }
        if case .version(let identifier) = kept {
            guard let version = versions.first(where: { $0.identifier == identifier }) else { throw CoordinationError.noSuchVersion(item, identifier) }
            try coordinator.replace(contentsOf: location, with: try version.contents(at: location))
        }
        if let folder = try versionsFolder(of: location, create: false) {
            for version in versions { _ = unlinkat(folder.rawValue, version.identifier, 0) }
            if let all = try? versionsRoot(in: location.folder, create: false) {
                _ = unlinkat(all.rawValue, location.name, AT_REMOVEDIR)  // only when empty
                _ = unlinkat(location.folder.rawValue, folderName, AT_REMOVEDIR)
            }
        }
        return kept
    }

    // MARK: Storage

    private static func parse(_ name: String, item: FilePath) -> FileVersion? {
        guard let dash = name.firstIndex(of: "-"), let dot = name.firstIndex(of: "."), dot < dash,
              let seconds = Int(name[..<dot]), let nanoseconds = Int(name[name.index(after: dot)..<dash]),
              name[name.index(after: dot)..<dash].count == 9, seconds >= 0 else { return nil }
        return FileVersion(item: item, identifier: name, modified: timespec(tv_sec: seconds, tv_nsec: nanoseconds),
                           savingComputer: String(name[name.index(after: dash)...]))
    }

    private static func versionsRoot(in parent: OwnedDescriptor, create: Bool) throws -> OwnedDescriptor? {
        try openFolder(folderName, in: parent, create: create)
    }

    static func versionsFolder(of location: FileCoordinator.Location, create: Bool) throws -> OwnedDescriptor? {
        guard let root = try versionsRoot(in: location.folder, create: create) else { return nil }
        return try openFolder(location.name, in: root, create: create)
    }

    /// A folder beneath `parent`, never through a link.
    private static func openFolder(_ name: String, in parent: OwnedDescriptor, create: Bool) throws -> OwnedDescriptor? {
        try openFolder(Array(name.utf8CString), in: parent, create: create)
    }

    private static func openFolder(_ name: [CChar], in parent: OwnedDescriptor, create: Bool) throws -> OwnedDescriptor? {
        if create, mkdirat(parent.rawValue, name, 0o755) != 0, errno != EEXIST {
            throw CoordinationError.system(operation: "creating", path: FileCoordinator.display(name), errno: Errno(rawValue: errno))
        }
        let fd = openat(parent.rawValue, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT && !create { return nil }
            throw CoordinationError.notARegularFile(FileCoordinator.display(name))
        }
        return OwnedDescriptor(taking: fd)
    }

    /// The whole file, refused (as not a file to handle) above `limit` bytes.
    static func readAll(_ file: OwnedDescriptor, path: FilePath, limit: Int = largest) throws -> [UInt8] {
        guard let status = try? file.status(), Int(status.st_size) <= limit else { throw CoordinationError.notARegularFile(path) }
        var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeMutableBytes { pread(file.rawValue, $0.baseAddress! + offset, $0.count - offset, off_t(offset)) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            offset += count
        }
        return Array(bytes[0..<offset])
    }
}
