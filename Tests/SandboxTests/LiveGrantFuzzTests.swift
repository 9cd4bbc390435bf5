import Foundation
@_spi(Fuzzing) import LiveGrantOracle
import Testing
@_spi(Fuzzing) @testable import Sandbox

/// The broker's decoder and socket under seeded fuzzing (the long,
/// coverage-guided run is `Fuzz/run.sh live-grant`, with the same oracle):
/// every byte is the hostile command's. The decoders never trap, accept
/// exactly what docs/live-grants.md calls well-formed and re-encode it to the
/// same bytes; every reply the broker can build decodes; a real broker answers
/// each message once, calling its handler only for a request that decodes.
@Suite struct LiveGrantFuzzTests {
    /// A few seconds of the suite's time in all: the long run is Fuzz/run.sh's.
    static let seeds: [UInt64] = [1, 0x5EED, 0xDEAD_BEEF]

    /// 20,000 inputs a seed: random bytes, valid requests and replies, and
    /// their mutations (bit flips, truncation, extension, lying lengths,
    /// header bytes, splices).
    @Test(arguments: seeds) func decodersAcceptExactlyTheDocumentedMessages(seed: UInt64) {
        var inputs = LiveGrantInputs(seed: seed)
        var kinds: [LiveGrantInputs.Kind: Int] = [:]
        var requests = 0, replies = 0, findings = 0
        for _ in 0..<20_000 {
            let (kind, bytes) = inputs.next()
            kinds[kind, default: 0] += 1
            if (try? LiveGrantRequest.decode(bytes)) != nil { requests += 1 }
            if (try? LiveGrantReply.decode(bytes)) != nil { replies += 1 }
            let problems = LiveGrantWireOracle.checkDecoders(bytes)
            findings += problems.count
            if findings < 10 { #expect(problems.isEmpty, "seed \(seed), \(kind): \(problems)") }
        }
        #expect(findings == 0, "seed \(seed): \(findings) findings")
        print("seed \(seed): 20000 inputs (\(kinds.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.value) \($0.key)" }.joined(separator: ", "))): \(requests) decode as requests, \(replies) as replies")
        // Both outcomes are exercised, or the property says nothing.
        #expect(requests > 1000 && replies > 1000 && requests < 15_000 && replies < 15_000)
    }

    /// Every value of each header byte (version, operation, flags, the zero
    /// byte; status and both length bytes of a reply) in valid messages of each shape.
    @Test func everyHeaderByteValue() {
        let requests = [
            LiveGrantRequest(operation: .openPanel, payload: Array("notes".utf8)),
            LiveGrantRequest(operation: .openPanel, readOnly: true, wantsBookmark: true, payload: []),
            LiveGrantRequest(operation: .startAccessing, payload: [1, 2, 3]),
            LiveGrantRequest(operation: .stopAccessing, payload: [UInt8](repeating: 9, count: 300)),
        ].map { $0.encoded() }
        let replies = [
            LiveGrantReply(status: .granted, text: Array("/run/sandboxed-run/grants/1".utf8), bookmark: [1, 2, 3]),
            LiveGrantReply(status: .malformed, message: "no"),
            LiveGrantReply(status: .invalid, text: [], bookmark: [UInt8](repeating: 4, count: 300)),
        ].map { $0.encoded() }
        var inputs = 0, accepted = 0
        for (message, positions) in requests.map({ ($0, 0..<6) }) + replies.map({ ($0, 0..<4) }) {
            for position in positions {
                for value in UInt8.min...UInt8.max {
                    var bytes = message
                    bytes[position] = value
                    let problems = LiveGrantWireOracle.checkDecoders(bytes)
                    #expect(problems.isEmpty, "byte \(position) = \(value): \(problems)")
                    inputs += 1
                    if LiveGrantWireSpec.isRequest(bytes) || LiveGrantWireSpec.isReply(bytes) { accepted += 1 }
                }
            }
        }
        print("every header byte value: \(inputs) inputs, \(accepted) well-formed")
        #expect(inputs == 256 * (4 * 6 + 3 * 4))
    }

    /// Whatever the broker puts in a reply (text or bookmark past their
    /// limits, an empty bookmark, fields set after `init`), the command
    /// decodes it: a reply that does not decode would leave the command
    /// without an answer.
    @Test(arguments: seeds) func everyReplyDecodes(seed: UInt64) {
        var inputs = LiveGrantInputs(seed: seed)
        var findings: [String] = []
        let edges: [LiveGrantReply] = {
            var longText = LiveGrantReply(status: .granted, text: [])
            longText.text = [UInt8](repeating: 65, count: 70_000)
            var emptyBookmark = LiveGrantReply(status: .granted, text: [1])
            emptyBookmark.bookmark = []
            var longBookmark = LiveGrantReply(status: .replaced, text: [])
            longBookmark.bookmark = [UInt8](repeating: 66, count: LiveGrantRequest.maximumBookmark + 1)
            return [
                longText, emptyBookmark, longBookmark,
                LiveGrantReply(status: .granted, text: [], bookmark: []),
                LiveGrantReply(status: .refused, text: [UInt8](repeating: 67, count: 9000), bookmark: [UInt8](repeating: 68, count: 9000)),
            ]
        }()
        for reply in edges { findings += LiveGrantWireOracle.checkReply(reply) }
        for round in 0..<3000 {
            var bytes = inputs.bytes(inputs.number(0...9) == 0 ? inputs.number(0...9000) : inputs.number(0...300))
            // Text lengthened past 64 KiB after `init` in one reply of 20 (it is slow to build).
            if !round.isMultiple(of: 20), !bytes.isEmpty { bytes[0] &= ~0x40 }
            findings += LiveGrantWireOracle.checkReply(LiveGrantWireOracle.reply(from: bytes))
        }
        #expect(findings.isEmpty, "seed \(seed): \(findings.count) findings, first \(findings.prefix(3))")
        print("seed \(seed): \(edges.count + 3000) replies built, \(findings.count) that do not decode")
    }

    /// A real broker over its socketpair: 4,000 messages a seed, each answered
    /// exactly once, well-formed; the handler called once for each request
    /// that decodes, never for anything else (answered `malformed`).
    @Test(arguments: seeds) func theBrokerAnswersEachMessageOnce(seed: UInt64) throws {
        let oracle = try LiveGrantWireOracle()
        var inputs = LiveGrantInputs(seed: seed)
        var findings: [String] = []
        for _ in 0..<4000 { findings += oracle.check(inputs.next().bytes) }
        #expect(findings.isEmpty, "seed \(seed): \(findings.count) findings, first \(findings.prefix(3))")
        #expect(oracle.handled == oracle.requests && oracle.broker.served == oracle.messages && oracle.messages == 4000)
        print("seed \(seed): \(oracle.messages) messages served, \(oracle.handled) handled, \(oracle.messages - oracle.requests) answered malformed")
        #expect(oracle.requests > 400 && oracle.messages - oracle.requests > 400)
    }

    /// Descriptors (SCM_RIGHTS) never enter the launcher and refuse the
    /// request; credentials (SCM_CREDENTIALS) are dropped by the kernel, so the
    /// request is served as if sent without; a message past the largest
    /// request, up to 65,536 bytes, is answered `malformed` whole (the
    /// broker's next read is the next message, not the rest of this one).
    @Test func attachmentsAndOversizeMessages() throws {
        let oracle = try LiveGrantWireOracle()
        var inputs = LiveGrantInputs(seed: 7)
        var findings: [String] = []
        var messages: [[UInt8]] = [[], [1], Array(LiveGrantRequest(operation: .stopAccessing, payload: [1]).encoded())]
        for _ in 0..<200 { messages.append(inputs.next().bytes) }
        for _ in 0..<50 { messages.append(inputs.validRequest()) }
        for attachment in LiveGrantAttachment.allCases {
            for bytes in messages { findings += oracle.check(bytes, attaching: attachment) }
        }
        let valid = LiveGrantRequest(operation: .startAccessing, payload: [7]).encoded()
        let largest = LiveGrantRequest(operation: .startAccessing, payload: [UInt8](repeating: 7, count: LiveGrantRequest.maximumBookmark)).encoded()
        for size in [LiveGrantRequest.maximumSize + 1, LiveGrantRequest.maximumSize + 2, 16_384, 65_535, 65_536] {
            let oversize = valid + [UInt8](repeating: 0x41, count: size - valid.count)
            var lying = oversize
            lying[4] = UInt8((size - 6) & 0xFF)
            lying[5] = UInt8((size - 6) >> 8 & 0xFF)
            // Its first 8198 bytes are the largest request: a broker reading only those would serve it.
            let validPrefix = largest + [UInt8](repeating: 0x41, count: size - largest.count)
            for bytes in [oversize, lying, validPrefix] {
                for attachment in LiveGrantAttachment.allCases { findings += oracle.check(bytes, attaching: attachment) }
            }
        }
        #expect(findings.isEmpty, "\(findings.count) findings, first \(findings.prefix(3))")
        print("attachments and oversize messages: \(oracle.messages) messages, \(oracle.handled) handled")
        // Credentials did reach the handler (served as if sent without), descriptors never.
        #expect(oracle.handled == oracle.requests && oracle.handled > 0)
    }

    /// The seed corpus of Fuzz/run.sh live-grant: a valid request of each operation and flag.
    @Test func theFuzzSeedsAreValidRequests() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Fuzz/LiveGrantCorpus")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        var operations: Set<UInt8> = []
        for name in names {
            let request = try LiveGrantRequest.decode(Array(try Data(contentsOf: folder.appendingPathComponent(name))))
            operations.insert(request.operation.rawValue)
        }
        #expect(operations == [1, 2, 3] && names.count >= 9)
    }
}
