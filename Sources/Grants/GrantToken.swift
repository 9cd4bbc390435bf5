import Crypto
import Sandbox

/// The secret a grant is known by: 32 random bytes, sealed inside bookmark
/// blobs and never stored in the clear. The ledger keys grants by its
/// SHA-256, which is also the public grant id.
public struct GrantToken: Hashable, Sendable {
    static let length = 32
    let bytes: [UInt8]

    init(bytes: [UInt8]) { self.bytes = bytes }

    static func random() -> GrantToken {
        var generator = SystemRandomNumberGenerator()
        return GrantToken(bytes: (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// What the ledger stores and users see (hex, shortened in listings).
    var id: GrantID { GrantID(digest: Array(SHA256.hash(data: bytes))) }
}

/// A grant's public name: the SHA-256 of its token.
public struct GrantID: Hashable, Sendable, CustomStringConvertible {
    public let digest: [UInt8]

    public var hex: String { Keyring.hex(digest) }

    /// The id whose `hex` is `hex` (64 lower-case digits), or nil.
    public init?(hex: String) {
        guard let digest = Printable.bytes(hex: hex), digest.count == 32 else { return nil }
        self.digest = digest
    }

    init(digest: [UInt8]) { self.digest = digest }

    /// The first 12 hex digits: enough to name one grant among millions.
    public var description: String { String(hex.prefix(12)) }
}

/// How a grant may be used.
public enum GrantAccess: String, Sendable, Codable {
    case readOnly = "read-only"
    case readWrite = "read-write"

    /// The access a grant of this kind gives under `policy`'s
    /// `com.apple.security.files.user-selected.*` entitlement, or nil when
    /// the policy takes no user-selected folders.
    public func pathAccess(allowedBy policy: Policy) -> Policy.PathAccess? {
        switch (self, policy.userSelectedAccess) {
        case (_, nil): nil
        case (.readWrite, .readWrite?): .readWrite
        default: .readOnly
        }
    }
}
