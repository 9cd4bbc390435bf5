import Sandbox

/// Grants: the only way for a confined writer to reach a user's folder.
///
/// This module holds the grant vocabulary; the picker-broker, sealed
/// bookmarks and resolution build on it (see the grants issue).
public enum GrantAccess: String, Sendable, Codable {
    case readOnly = "read-only"
    case readWrite = "read-write"

    /// The Landlock access a grant of this kind gives, capped by what the
    /// policy's `com.apple.security.files.user-selected.*` entitlement allows.
    public func pathAccess(allowedBy policy: Policy) -> Policy.PathAccess? {
        switch (self, policy.userSelectedAccess) {
        case (_, nil): nil
        case (.readWrite, .readWrite?): .readWrite
        default: .readOnly
        }
    }
}
