@preconcurrency import Glibc
import SystemPackage

/// One entry of a directory listing, without "." and "..".
public struct DirectoryEntry: Sendable {
    public let name: String
    /// From `d_type`: whether the entry is a directory (DT_DIR). Symlinks to
    /// directories are not, and DT_UNKNOWN filesystems report false.
    public let isDirectory: Bool
}

/// `opendir(3)` and `readdir(3)`: the names in `path`.
public func directoryEntries(_ path: String) throws(Errno) -> [DirectoryEntry] {
    guard let dir = opendir(path) else { throw Errno(rawValue: errno) }
    defer { closedir(dir) }
    var entries: [DirectoryEntry] = []
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
        if name == "." || name == ".." { continue }
        entries.append(DirectoryEntry(name: name, isDirectory: entry.pointee.d_type == DT_DIR))
    }
    return entries
}
