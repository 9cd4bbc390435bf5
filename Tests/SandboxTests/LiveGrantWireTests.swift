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

/// The broker's decoder: every byte is the command's. Each malformed shape is
/// refused whole, and every well-formed request survives a round trip.
@Suite struct LiveGrantWireTests {
    static func header(_ op: UInt8, flags: UInt8 = 0, length: Int) -> [UInt8] {
        [1, op, flags, 0, UInt8(length & 0xFF), UInt8(length >> 8)]
    }

    @Test func requestsRoundTrip() throws {
        let requests = [
            LiveGrantRequest(operation: .openPanel, readOnly: true, wantsBookmark: true, payload: Array("notes".utf8)),
            LiveGrantRequest(operation: .startAccessing, payload: [UInt8](repeating: 7, count: LiveGrantRequest.maximumBookmark)),
            LiveGrantRequest(operation: .stopAccessing, payload: [1]),
        ]
        for request in requests { #expect(try LiveGrantRequest.decode(request.encoded()) == request) }
        let replies = [
            LiveGrantReply(status: .granted, text: Array("/run/sandboxed-run/grants/1".utf8), bookmark: [1, 2, 3]),
            LiveGrantReply(status: .revoked, message: "revoked"),
        ]
        for reply in replies { #expect(try LiveGrantReply.decode(reply.encoded()) == reply) }
    }

    @Test func malformedRequestsAreRefused() {
        let bad: [(String, [UInt8])] = [
            ("a prompt longer than 512", Self.header(1, length: 513) + [UInt8](repeating: 65, count: 513)),
            ("a bookmark longer than the maximum", Self.header(2, length: 8193) + [UInt8](repeating: 65, count: 8193)),
            ("the bookmark flag on start", Self.header(2, flags: 2, length: 1) + [1]),
            ("read-only on stop", Self.header(3, flags: 1, length: 1) + [1]),
            ("an empty bookmark", Self.header(2, length: 0)),
            ("a length beyond the bytes", Self.header(3, length: 5) + [1, 2]),
            ("bytes beyond the length", Self.header(3, length: 1) + [1, 2]),
            ("operation 0", Self.header(0, length: 0)),
            ("operation 4", Self.header(4, length: 0)),
            ("flag bit 2", Self.header(1, flags: 4, length: 0)),
        ]
        for (what, bytes) in bad {
            #expect(throws: LiveGrantWireError.self, "\(what)") { try LiveGrantRequest.decode(bytes) }
        }
    }

    @Test func malformedRepliesAreRefused() {
        let text = Array("x".utf8)
        let bad: [[UInt8]] = [
            [1, 0, 1, 0] + text + [1],            // a bookmark length cut short
            [1, 0, 1, 0] + text + [3, 0, 1, 2],   // a bookmark shorter than its length
            [1, 0, 1, 0] + text + [0, 0],         // an empty bookmark
            [1, 8, 0, 0],                         // status 8 is no status
            [1, 0, 5, 0] + text,                  // text shorter than its length
        ]
        for bytes in bad { #expect(throws: LiveGrantWireError.self, "\(bytes)") { try LiveGrantReply.decode(bytes) } }
    }

    /// Random bytes never crash the decoder, and what it accepts re-encodes to the same bytes.
    @Test func randomBytesDecodeOrAreRefused() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let op = UInt8.random(in: 0...4, using: &generator)
            let length = Int.random(in: 0...40, using: &generator)
            var bytes = Self.header(op, flags: UInt8.random(in: 0...3, using: &generator), length: length)
                + (0..<Int.random(in: 0...42, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if Bool.random(using: &generator) { bytes[Int.random(in: 0..<bytes.count, using: &generator)] ^= 0xFF }
            if let request = try? LiveGrantRequest.decode(bytes) { #expect(request.encoded() == bytes) }
        }
    }
}
