import Sandbox
import SystemPackage

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
    public init(status: BookmarkStatus, message: String) {
        self.status = status
        self.message = message
    }
    public var description: String { "\(status.rawValue): \(message)" }
}

extension GrantBroker {
    /// As `url.bookmarkData(options: [.withSecurityScope], ...)`: grants
    /// `app` the folder at `path` and returns the bookmark data.
    public func bookmarkData(forFolder path: String, app: AppID, options: BookmarkCreationOptions = .withSecurityScope) throws(GrantError) -> [UInt8] {
        let access: GrantAccess = options.contains(.securityScopeAllowOnlyReadAccess) ? .readOnly : .readWrite
        return try grant(app: app, folder: path, access: access).bookmark
    }

    /// Fresh bookmark data for a URL that resolved stale.
    public func bookmarkData(renewing data: [UInt8], app: AppID) throws(GrantError) -> [UInt8] {
        try renew(try resolve(data, app: app), app: app)
    }
}
