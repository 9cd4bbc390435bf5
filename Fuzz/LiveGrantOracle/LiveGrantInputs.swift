// Seeded inputs for the wire protocol: random bytes, valid requests and
// replies, and mutations of them. The same seed gives the same inputs, so a
// finding of LiveGrantFuzzTests names its seed and can be replayed.
@_spi(Fuzzing) import Sandbox

/// SplitMix64: small, fast, and the same sequence on every machine.
@_spi(Fuzzing) public struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@_spi(Fuzzing) public struct LiveGrantInputs {
    public enum Kind: String, CaseIterable, Sendable {
        case random, valid, bitFlips, truncated, extended, lyingLength, headerByte, spliced
    }

    var generator: SeededGenerator

    public init(seed: UInt64) { generator = SeededGenerator(seed: seed) }

    public mutating func number(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &generator) }

    /// `count` random bytes, eight at a time.
    public mutating func bytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: (count + 7) & ~7)
        bytes.withUnsafeMutableBytes { raw in
            for offset in stride(from: 0, to: raw.count, by: 8) { raw.storeBytes(of: generator.next(), toByteOffset: offset, as: UInt64.self) }
        }
        return Array(bytes.prefix(count))
    }

    /// A length at, next to, or between the bounds.
    mutating func length(_ bounds: ClosedRange<Int>) -> Int {
        switch number(0...5) {
        case 0: bounds.lowerBound
        case 1: bounds.upperBound
        case 2: max(bounds.lowerBound, bounds.upperBound - 1)
        case 3: min(bounds.upperBound, bounds.lowerBound + 1)
        default: number(bounds.lowerBound...min(bounds.upperBound, bounds.lowerBound + 100))
        }
    }

    /// A well-formed request of a random operation, with flags it allows.
    public mutating func validRequest() -> [UInt8] {
        switch number(1...3) {
        case 1:
            LiveGrantRequest(operation: .openPanel, readOnly: Bool.random(using: &generator), wantsBookmark: Bool.random(using: &generator),
                             payload: bytes(length(0...LiveGrantRequest.maximumPrompt))).encoded()
        case 2: LiveGrantRequest(operation: .startAccessing, payload: bytes(length(1...LiveGrantRequest.maximumBookmark))).encoded()
        default: LiveGrantRequest(operation: .stopAccessing, payload: bytes(length(1...LiveGrantRequest.maximumBookmark))).encoded()
        }
    }

    /// A well-formed reply: any status, a text, and a bookmark or none.
    public mutating func validReply() -> [UInt8] {
        let status = LiveGrantReply.Status.allCases.randomElement(using: &generator)!
        let bookmark = Bool.random(using: &generator) ? bytes(length(1...LiveGrantRequest.maximumBookmark)) : nil
        return LiveGrantReply(status: status, text: bytes(length(0...LiveGrantReply.maximumText)), bookmark: bookmark).encoded()
    }

    /// The next input and how it was made.
    public mutating func next() -> (kind: Kind, bytes: [UInt8]) {
        let kind = Kind.allCases.randomElement(using: &generator)!
        let isRequest = Bool.random(using: &generator)
        if kind == .random { return (kind, bytes(number(0...9) == 0 ? number(0...9000) : number(0...64))) }
        var bytes = isRequest ? validRequest() : validReply()
        switch kind {
        case .random, .valid: break
        case .bitFlips:
            for _ in 0..<number(1...4) { bytes[number(0...bytes.count - 1)] ^= 1 << UInt8(number(0...7)) }
        case .truncated: bytes.removeLast(number(1...bytes.count))
        case .extended: bytes += self.bytes(number(0...3) == 0 ? number(1...9000) : number(1...64))
        case .lyingLength:
            // The request's payload length, the reply's text length, or the bookmark length behind the text.
            let textLength = Int(bytes[2]) | Int(bytes[3]) << 8
            let at = isRequest ? 4 : (bytes.count > 4 + textLength && Bool.random(using: &generator) ? 4 + textLength : 2)
            let actual = Int(bytes[at]) | Int(bytes[at + 1]) << 8
            let lie = [actual - 1, actual + 1, 0, 1, 512, 513, 8191, 8192, 8193, 0xFFFF, number(0...0xFFFF)].randomElement(using: &generator)!
            let value = lie & 0xFFFF
            bytes[at] = UInt8(value & 0xFF)
            bytes[at + 1] = UInt8(value >> 8)
        case .headerByte: bytes[number(0...3)] = UInt8(number(0...255))
        case .spliced:
            let other = Bool.random(using: &generator) ? validRequest() : validReply()
            bytes = Array(bytes.prefix(number(0...bytes.count))) + other.suffix(number(0...other.count))
        }
        return (kind, bytes)
    }
}
