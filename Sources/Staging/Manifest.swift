@preconcurrency import Glibc
import SystemKit

/// What kind of thing an entry is.
public enum ItemKind: String, Sendable, Equatable {
    case folder, file, link
    /// A FIFO, socket or device: never copied into a clone, never applied.
    case special

    init(mode: mode_t) {
        switch mode & S_IFMT {
        case S_IFDIR: self = .folder
        case S_IFREG: self = .file
        case S_IFLNK: self = .link
        default: self = .special
        }
    }
}

/// An inode's identity and the status that says whether it changed: the
/// host side is compared before anything is applied ("changed since staged").
/// ctime cannot be set by a process, so any write, chmod, rename or link
/// moves it on.
struct Status: Equatable, Sendable {
    var device: UInt64
    var inode: UInt64
    var size: Int64
    /// Nanoseconds since the epoch.
    var modified: Int64
    var changed: Int64
    var mode: UInt32

    init(device: UInt64, inode: UInt64, size: Int64, modified: Int64, changed: Int64, mode: UInt32) {
        (self.device, self.inode, self.size, self.modified, self.changed, self.mode) = (device, inode, size, modified, changed, mode)
    }

    init(_ st: stat) {
        self.init(
            device: UInt64(st.st_dev), inode: UInt64(st.st_ino), size: Int64(st.st_size),
            modified: Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec),
            changed: Int64(st.st_ctim.tv_sec) * 1_000_000_000 + Int64(st.st_ctim.tv_nsec), mode: UInt32(st.st_mode))
    }

    /// Same inode, same contents and mode as far as the kernel says.
    func isUnchanged(as other: Status) -> Bool {
        device == other.device && inode == other.inode && size == other.size && modified == other.modified
            && changed == other.changed && mode == other.mode
    }
}

/// One item of the granted folder as it was cloned: where, what, the host
/// inode it was copied from (as it was then) and the clone's inode (its
/// file handle, which the kernel never gives to another inode, and its
/// status after the copy).
struct ManifestEntry: Equatable, Sendable {
    /// Relative to the grant's folder, names joined by "/": empty for the folder itself.
    var path: [UInt8]
    var kind: ItemKind
    var host: Status
    /// Empty for a special file (nothing was made for it).
    var clone: [UInt8]
    var cloneStatus: Status
}

/// The manifest: a text file, one entry a line, every field checked when
/// read. It is the broker's (in its private state), but it is read as
/// if hostile all the same: a damaged one applies nothing.
struct Manifest: Equatable, Sendable {
    static let header = "sandboxed-run-staging-manifest 1"
    var entries: [ManifestEntry] = []

    func encoded() -> [UInt8] {
        var out = Array((Self.header + "\n").utf8)
        for entry in entries {
            let kind: String = switch entry.kind {
            case .folder: "d"
            case .file: "f"
            case .link: "l"
            case .special: "x"
            }
            var fields = [kind, entry.path.isEmpty ? "-" : Printable.hex(entry.path), entry.clone.isEmpty ? "-" : Printable.hex(entry.clone)]
            for status in [entry.host, entry.cloneStatus] {
                fields += [String(status.device), String(status.inode), String(status.size), String(status.modified), String(status.changed), String(status.mode)]
            }
            out += Array((fields.joined(separator: " ") + "\n").utf8)
        }
        return out
    }

    /// Parses `bytes`, refusing anything this version would not have written.
    static func decode(_ bytes: [UInt8]) throws(StagingError) -> Manifest {
        func damaged(_ problem: String) -> StagingError { .damaged(file: "manifest", problem: problem) }
        var lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        guard bytes.last == UInt8(ascii: "\n"), lines.removeLast().isEmpty else { throw damaged("it does not end with a whole line") }
        guard let first = lines.first, String(decoding: first, as: UTF8.self) == header else { throw damaged("its first line is not \"\(header)\"") }
        var manifest = Manifest()
        var seen = Set<[UInt8]>()
        for (number, line) in lines.enumerated().dropFirst() {
            let fields = line.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
            guard fields.count == 15 else { throw damaged("line \(number + 1) has \(fields.count) fields, not 15") }
            let kind: ItemKind
            switch fields[0] {
            case "d": kind = .folder
            case "f": kind = .file
            case "l": kind = .link
            case "x": kind = .special
            default: throw damaged("line \(number + 1) has an unknown kind")
            }
            guard let path = fields[1] == "-" ? [] : Printable.bytes(hex: fields[1]), let clone = fields[2] == "-" ? [] : Printable.bytes(hex: fields[2]),
                  path.isEmpty == (fields[1] == "-"), clone.isEmpty == (fields[2] == "-") else {
                throw damaged("line \(number + 1) has a field that is not hex")
            }
            guard path.isEmpty == (number == 1), !path.contains(0), isRelative(path) else { throw damaged("line \(number + 1) names no plain relative path") }
            guard seen.insert(path).inserted else { throw damaged("line \(number + 1) names a path twice") }
            var statuses: [Status] = []
            for base in [3, 9] {
                guard let device = UInt64(fields[base]), let inode = UInt64(fields[base + 1]), let size = Int64(fields[base + 2]),
                      let modified = Int64(fields[base + 3]), let changed = Int64(fields[base + 4]), let mode = UInt32(fields[base + 5]) else {
                    throw damaged("line \(number + 1) has a number out of range")
                }
                statuses.append(Status(device: device, inode: inode, size: size, modified: modified, changed: changed, mode: mode))
            }
            manifest.entries.append(ManifestEntry(path: path, kind: kind, host: statuses[0], clone: clone, cloneStatus: statuses[1]))
        }
        guard manifest.entries.first?.kind == .folder else { throw damaged("it does not start with the folder itself") }
        return manifest
    }

    /// Names only: no empty name, ".", "..", or leading or trailing "/".
    static func isRelative(_ path: [UInt8]) -> Bool {
        if path.isEmpty { return true }
        return !path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).contains { name in
            name.isEmpty || name.elementsEqual([0x2E]) || name.elementsEqual([0x2E, 0x2E])
        }
    }
}

/// A manifest's entries by path, while changes are applied or rejected one
/// by one (each looks its entry up: thousands of changes, no quadratic cost).
struct ManifestEntries {
    private var byPath: [[UInt8]: ManifestEntry]

    init(_ manifest: Manifest) {
        byPath = Dictionary(manifest.entries.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
    }

    subscript(path: [UInt8]) -> ManifestEntry? { byPath[path] }

    mutating func set(_ entry: ManifestEntry) { byPath[entry.path] = entry }

    mutating func remove(_ path: [UInt8]) { byPath[path] = nil }

    /// `path` and everything below it.
    mutating func removeTree(_ path: [UInt8]) {
        byPath[path] = nil
        let prefix = path + [UInt8(ascii: "/")]
        for key in byPath.keys where key.count > prefix.count && key.starts(with: prefix) { byPath[key] = nil }
    }

    /// The manifest again: the folder itself first, then by path.
    var manifest: Manifest {
        Manifest(entries: byPath.values.sorted { a, b in a.path.isEmpty || (!b.path.isEmpty && a.path.lexicographicallyPrecedes(b.path)) })
    }
}
