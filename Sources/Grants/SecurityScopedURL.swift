import Sandbox
import SystemPackage
import Synchronization

/// Apple's `URL.BookmarkCreationOptions`, for the options that matter here.
public struct BookmarkCreationOptions: OptionSet, Sendable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static let withSecurityScope = BookmarkCreationOptions(rawValue: 1 << 11)
    public static let securityScopeAllowOnlyReadAccess = BookmarkCreationOptions(rawValue: 1 << 12)
}

/// A bookmark that does not resolve to its folder: why, for a person.
public struct BookmarkResolutionError: Error, Sendable, CustomStringConvertible {
    public let status: BookmarkStatus
    public let message: String
    public var description: String { "\(status.rawValue): \(message)" }
}

/// A granted folder, as Apple's security-scoped `URL`: resolve it from
/// bookmark data, then bracket its use with start/stop accessing. Calls
/// nest; the folder stays pinned (its verified fd open) while any access
/// is outstanding, and `outstandingAccesses` shows leaked starts.
/// Not Sendable: it keeps its broker, whose ledger connection is single-threaded.
public final class SecurityScopedURL {
    public let path: FilePath
    public let access: GrantAccess
    let folder: OwnedDescriptor
    let grantID: GrantID?
    private let broker: GrantBroker
    private let count = Mutex(0)

    init(path: FilePath, access: GrantAccess, folder: OwnedDescriptor, grantID: GrantID?, broker: GrantBroker) {
        self.path = path
        self.access = access
        self.folder = folder
        self.grantID = grantID
        self.broker = broker
    }

    /// Returns false when the grant was revoked since the URL was resolved.
    public func startAccessingSecurityScopedResource() -> Bool {
        if let grantID, let record = try? broker.record(grantID), !record.isLive {
            return false
        }
        count.withLock { $0 += 1 }
        return true
    }

    public func stopAccessingSecurityScopedResource() {
        count.withLock { $0 = max(0, $0 - 1) }
    }

    public var outstandingAccesses: Int { count.withLock { $0 } }
}

extension GrantBroker {
    /// As `url.bookmarkData(options: [.withSecurityScope], ...)`: grants
    /// `app` the folder at `path` and returns the bookmark data.
    public func bookmarkData(forFolder path: String, app: AppID, options: BookmarkCreationOptions = .withSecurityScope) throws(GrantError) -> [UInt8] {
        let access: GrantAccess = options.contains(.securityScopeAllowOnlyReadAccess) ? .readOnly : .readWrite
        return try grant(app: app, folder: path, access: access).bookmark
    }

    /// As `URL(resolvingBookmarkData:options:relativeTo:bookmarkDataIsStale:)`:
    /// the folder, or an error for replaced, missing, covered, inaccessible,
    /// revoked, wrong-app and invalid bookmarks. A moved folder resolves, with
    /// `isStale` set: save `bookmarkData(renewing:)` in place of the old data,
    /// as Apple advises.
    public func url(
        resolvingBookmarkData data: [UInt8], app: AppID, options: ResolutionOptions = [], bookmarkDataIsStale isStale: inout Bool
    ) throws(BookmarkResolutionError) -> SecurityScopedURL {
        let resolution: BookmarkResolution
        do {
            resolution = try resolve(data, app: app, options: options)
        } catch {
            throw BookmarkResolutionError(status: .invalid, message: error.description)
        }
        guard let folder = resolution.folder, let path = resolution.currentPath, let access = resolution.access else {
            throw BookmarkResolutionError(status: resolution.status, message: resolution.message)
        }
        isStale = resolution.isStale
        return SecurityScopedURL(path: path, access: access, folder: folder, grantID: resolution.grant?.id, broker: self)
    }

    /// Fresh bookmark data for a URL that resolved stale.
    public func bookmarkData(renewing data: [UInt8], app: AppID) throws(GrantError) -> [UInt8] {
        try renew(try resolve(data, app: app), app: app)
    }
}
