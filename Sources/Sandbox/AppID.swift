/// An application identifier such as `com.example.memo`: the key of the
/// app's container and of its grants.
public struct AppID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    /// Accepts 1 to 255 characters of `A-Z a-z 0-9 . - _`, not starting
    /// with a dot: it becomes a directory name, so nothing may escape.
    public init(_ rawValue: String) throws(SandboxError) {
        let allowed = rawValue.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == 0x2E || byte == 0x2D || byte == 0x5F
        }
        guard !rawValue.isEmpty, rawValue.utf8.count <= 255, allowed, !rawValue.hasPrefix(".") else {
            throw .usage(
                "invalid app id '\(rawValue)': use 1 to 255 letters, digits, '.', '-' or '_', "
                    + "not starting with '.' (for example com.example.memo)")
        }
        self.rawValue = rawValue
    }

    public var description: String { rawValue }
}
