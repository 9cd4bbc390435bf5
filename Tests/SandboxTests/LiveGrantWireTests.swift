import Testing
@testable import Sandbox

/// Live grants: the keys that open them in the shipped policies.
@Suite struct LiveGrantPolicyTests {
    /// As on Apple platforms: writer, networked and developer take
    /// user-selected folders read-write and keep bookmarks of them; read-only
    /// the read-only pair. A policy file without the key keeps none.
    @Test func shippedPoliciesCarryTheLiveGrantKeys() throws {
        for name in ["writer", "networked", "developer"] {
            let policy = try #require(Policy.builtin(named: name))
            #expect(policy.userSelectedAccess == .readWrite && policy.bookmarksAppScope, "\(name)")
        }
        let reader = try #require(Policy.builtin(named: "read-only"))
        #expect(reader.userSelectedAccess == .readOnly && reader.bookmarksAppScope)
        let plain = try Policy(data: Array("""
            <plist version="1.0"><dict><key>com.apple.security.app-sandbox</key><true/>
            <key>com.apple.security.files.user-selected.read-write</key><true/></dict></plist>
            """.utf8), source: "test")
        #expect(!plain.bookmarksAppScope)
        let scoped = try Policy(data: Array("""
            <plist version="1.0"><dict><key>com.apple.security.app-sandbox</key><true/>
            <key>com.apple.security.files.bookmarks.app-scope</key><true/></dict></plist>
            """.utf8), source: "test")
        #expect(scoped.bookmarksAppScope && scoped.warnings.isEmpty, "understood, not ignored: \(scoped.warnings)")
    }
}
