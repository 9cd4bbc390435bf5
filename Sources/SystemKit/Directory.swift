@preconcurrency import Glibc
import SystemPackage

/// One entry of a directory listing, without "." and "..".
public struct DirectoryEntry: Sendable {
    /// The name for people and UTF-8 paths; `rawName` is the name itself.
    public let name: String
    /// The name's bytes, which need not be UTF-8.
    public let rawName: [UInt8]
    /// From `d_type`: whether the entry is a directory (DT_DIR). Symlinks to
    /// directories are not, and DT_UNKNOWN filesystems report false.
    public let isDirectory: Bool
}

/// `fdopendir(3)`: a stream that owns `descriptor` from now on (`closedir`
/// closes it). When the stream cannot be made, `descriptor` keeps it and
/// closes it: it is given away only once the stream has it.
public func directoryStream(taking descriptor: OwnedDescriptor) throws(Errno) -> OpaquePointer {
    guard let stream = fdopendir(descriptor.rawValue) else { throw Errno(rawValue: errno) }
    _ = descriptor.release()
    return stream
}

/// `opendir(3)` and `readdir(3)`: the names in `path`.
public func directoryEntries(_ path: String) throws(Errno) -> [DirectoryEntry] {
    try directoryEntries(FilePath(path))
}

/// `opendir(3)` and `readdir(3)`: the names in `path`, with their bytes.
public func directoryEntries(_ path: FilePath) throws(Errno) -> [DirectoryEntry] {
    guard let dir = path.withPlatformString({ opendir($0) }) else { throw Errno(rawValue: errno) }
    defer { closedir(dir) }
    var entries: [DirectoryEntry] = []
    while let entry = readdir(dir) {
        let raw = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
        if raw == [0x2E] || raw == [0x2E, 0x2E] { continue }
        entries.append(DirectoryEntry(name: String(decoding: raw, as: UTF8.self), rawName: raw, isDirectory: entry.pointee.d_type == DT_DIR))
    }
    return entries
}
