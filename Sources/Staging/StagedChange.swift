@preconcurrency import Glibc
import SystemKit
import SystemPackage

/// One change a command made in a staged grant, relative to the folder.
public struct StagedChange: Sendable, Equatable {
    public enum Kind: String, Sendable, CaseIterable {
        /// Made in the run: nothing was at `path` when the grant was staged.
        case added
        /// Its contents changed (for a file), or a link now says something else.
        case modified
        /// Gone from the clone. Always listed, one entry per item.
        case deleted
        /// Moved from `from` (its contents may have changed too: `contentsChanged`).
        case renamed
        /// Only its permission bits changed.
        case modeChanged = "mode-changed"
    }

    public let kind: Kind
    /// Relative to the granted folder: names joined by "/", as bytes.
    public let path: [UInt8]
    /// For `renamed`: where it was.
    public let from: [UInt8]?
    public let item: ItemKind
    /// For `renamed` and `modified`: whether the bytes differ from the host's.
    public let contentsChanged: Bool
    /// The permission bits before and after (nil where there is no such side).
    public let oldMode: UInt32?
    public let newMode: UInt32?
    /// The host's item at `from ?? path` changed since it was staged (or
    /// something now sits where an added item would go): accepting keeps the
    /// host's version, and the staged bytes become a conflict version.
    public internal(set) var changedOutside: Bool

    /// The host path, for people: the folder's path and `path`.
    public func hostPath(in folder: FilePath) -> [UInt8] { Self.hostPath(path, in: folder) }

    /// `relative` (a staged path) in `folder`, as bytes.
    public static func hostPath(_ relative: [UInt8], in folder: FilePath) -> [UInt8] {
        var bytes = folder.bytes
        if !relative.isEmpty {
            if bytes.last != UInt8(ascii: "/") { bytes.append(UInt8(ascii: "/")) }
            bytes += relative
        }
        return bytes
    }
}

/// Every change of one staged grant, with what it takes to read or apply them.
public struct StagedChanges: Sendable {
    public let changes: [StagedChange]
    let manifest: Manifest
    /// The clone entries as found (for apply), by relative path.
    let found: [[UInt8]: TreeItem]
}

/// One item of the clone as the walk found it.
struct TreeItem: Sendable, Equatable {
    let path: [UInt8]
    let kind: ItemKind
    let identity: [UInt8]
    let status: Status
}
