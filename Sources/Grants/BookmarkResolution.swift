import Sandbox
import SystemPackage

/// What resolving a bookmark found. Each case has its own exit code for
/// `sandboxed-run resolve` and its own JSON status.
public enum BookmarkStatus: String, Sendable, CaseIterable {
    /// The folder is at its path and is the same folder.
    case fresh
    /// The folder exists elsewhere (same file handle): stale, can be followed.
    case moved
    /// Something else sits at the path and the original is gone: never granted silently.
    case replaced
    /// Neither the folder nor anything at its path exists.
    case missing
    case revoked
    /// A genuine bookmark, made for another app.
    case wrongApp = "wrong-app"
    /// Forged, corrupt, truncated, from an unknown key, or unknown to this broker.
    case invalid
    /// A filesystem mounted on the path, or on a folder above it, hides the
    /// folder: what the path leads to is not the folder. Never followed.
    case covered
    /// A folder on the path may not be searched by this user: whether the
    /// folder is still there cannot be told. A permission problem. Or the
    /// folder was found where its path is longer than PATH_MAX: no path leads there.
    case inaccessible

    public var exitCode: Int32 {
        switch self {
        case .fresh: 0
        case .moved: 10
        case .replaced: 11
        case .missing: 12
        case .revoked: 13
        case .wrongApp: 14
        case .invalid: 15
        case .covered: 16
        case .inaccessible: 17
        }
    }
}

/// How a moved folder was found.
public enum LocateMethod: Equatable, Sendable, CustomStringConvertible {
    /// `open_by_handle_at`, which needs CAP_DAC_READ_SEARCH.
    case fileHandle
    /// A search of nearby folders, each confirmed by its file handle.
    case boundedSearch(visited: Int)

    public var description: String {
        switch self {
        case .fileHandle: "open_by_handle_at"
        case .boundedSearch(let visited): "a search of \(visited) nearby folders, confirmed by file handle"
        }
    }
}

/// The outcome of resolving a bookmark blob.
public struct BookmarkResolution: @unchecked Sendable {
    public let status: BookmarkStatus
    /// The ledger's record, when the blob was authentic and known.
    public let grant: GrantRecord?
    public let access: GrantAccess?
    /// Where the folder was when the bookmark was made.
    public let originalPath: FilePath?
    /// Where it is now (fresh or moved).
    public let currentPath: FilePath?
    /// As Apple's `bookmarkDataIsStale`: re-save the bookmark. True when the
    /// folder moved, or when a retired-but-kept key sealed it.
    public let isStale: Bool
    public let method: LocateMethod?
    /// The verified folder (fresh or moved): rules must be added through it.
    public let folder: OwnedDescriptor?
    /// A sentence a person understands.
    public let message: String

    let bookmark: Bookmark?
}
