import SystemPackage

/// The protocol's names beside an item `NAME` (PROTOCOL.md, "Names"). Every
/// sibling is the item's *stem* followed by a suffix. The stem is `.NAME`
/// while the longest sibling still fits in NAME_MAX (255 bytes), and
/// `.sr2-` followed by 32 hex digits of SHA-256(NAME) otherwise: one form
/// per item, so every party computes the same name and never has to guess.
public enum ItemNames {
    /// The protocol's version: in the journal's magic line and the placeholder stub.
    public static let protocolVersion = 2
    static let nameMax = 255

    /// What stands beside an item.
    public enum Sibling: String, CaseIterable, Sendable {
        /// The placeholder stub of an evicted item.
        case placeholder = ".icloud"
        /// The sync daemon's copy of an evicted item (its "server" copy).
        case data = ".icloud.data"
        /// A writer's request to bring an evicted item back.
        case download = ".icloud.download"
        /// The description of a record being appended across a page.
        case journal = ".sr-journal"
        /// The journal while it is being written.
        case stagedJournal = ".sr-journal.new"
    }

    /// `.sr-` and 16 hex digits: a temporary file beside the item.
    static let temporaryPrefix = Array(".sr-".utf8)
    static let temporaryDigits = 16
    /// The longest suffix (a temporary's); 20 bytes.
    static let longestSuffix = temporaryPrefix.count + temporaryDigits
    /// Items with names up to this many bytes keep the readable stem `.NAME`.
    public static let longestReadableName = nameMax - 1 - longestSuffix
    static let hashedPrefix = Array(".sr2-".utf8)

    /// `.NAME`, or `.sr2-<32 hex>` for a name longer than `longestReadableName` bytes.
    public static func stem(of name: [UInt8]) -> [UInt8] {
        if name.count <= longestReadableName { return [UInt8(ascii: ".")] + name }
        return hashedPrefix + Array(SHA256.hash(name).prefix(16).flatMap { hexDigits($0) })
    }

    /// Whether `stem` has the hashed form (then only a stub's NSURLNameKey, or
    /// an item whose stem it is, says which item it belongs to).
    static func isHashed(_ stem: [UInt8]) -> Bool {
        stem.count == hashedPrefix.count + 32 && stem.starts(with: hashedPrefix)
            && stem.dropFirst(hashedPrefix.count).allSatisfy { isHexDigit($0) }
    }

    /// The sibling's name, NUL-terminated.
    static func sibling(_ kind: Sibling, of name: [CChar]) -> [CChar] {
        terminated(stem(of: bytes(name)) + Array(kind.rawValue.utf8))
    }

    /// The name protocol version 1 gave this sibling (`.NAME` + suffix,
    /// whatever its length), when it differs from version 2's and fits in a
    /// name: a version 1 party's file there must be refused, not overlooked.
    static func versionOneSibling(_ kind: Sibling, of name: [CChar]) -> [CChar]? {
        let item = bytes(name)
        guard item.count > longestReadableName else { return nil }
        let old = [UInt8(ascii: ".")] + item + Array(kind.rawValue.utf8)
        return old.count <= nameMax ? terminated(old) : nil
    }

    /// A new temporary's name: the stem, `.sr-` and 16 random hex digits.
    static func temporary(of name: [CChar]) -> [CChar] {
        terminated(stem(of: bytes(name)) + temporarySuffix())
    }

    /// `.sr-` and 16 random hex digits: also the name of a temporary inside a versions folder.
    static func temporarySuffix() -> [UInt8] {
        let random = UInt64.random(in: 0...UInt64.max)
        return temporaryPrefix + (0..<8).flatMap { hexDigits(UInt8(truncatingIfNeeded: random >> (8 * UInt64($0)))) }
    }

    /// If `entry` is `STEM.sr-<16 hex>`, its stem.
    static func temporaryStem(_ entry: [UInt8]) -> [UInt8]? {
        let tail = temporaryPrefix.count + temporaryDigits
        guard entry.count > tail, entry.first == UInt8(ascii: ".") else { return nil }
        let suffix = entry.suffix(tail)
        guard suffix.starts(with: temporaryPrefix), suffix.dropFirst(temporaryPrefix.count).allSatisfy({ isHexDigit($0) }) else { return nil }
        return Array(entry.dropLast(tail))
    }

    /// If `entry` is `STEM` + `kind`'s suffix (and STEM is a stem: `.` and at least one byte), its stem.
    static func stem(of entry: [UInt8], kind: Sibling) -> [UInt8]? {
        let suffix = Array(kind.rawValue.utf8)
        guard entry.count > suffix.count + 1, entry.first == UInt8(ascii: "."), Array(entry.suffix(suffix.count)) == suffix else { return nil }
        return Array(entry.dropLast(suffix.count))
    }

    /// The item a readable stem names (`.NAME` -> NAME); nil for a hashed stem or one too long to be readable.
    static func readableItem(of stem: [UInt8]) -> [UInt8]? {
        guard stem.first == UInt8(ascii: "."), stem.count >= 2, stem.count - 1 <= longestReadableName else { return nil }
        let item = Array(stem.dropFirst())
        guard item != [0x2e], item != [0x2e, 0x2e] else { return nil }  // "." and "..": folders, never items
        return self.stem(of: item) == stem ? item : nil
    }

    static func bytes(_ name: [CChar]) -> [UInt8] {
        name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
    }

    static func terminated(_ bytes: [UInt8]) -> [CChar] {
        bytes.map { CChar(bitPattern: $0) } + [0]
    }

    static func hexDigits(_ byte: UInt8) -> [UInt8] {
        let digits = Array("0123456789abcdef".utf8)
        return [digits[Int(byte >> 4)], digits[Int(byte & 0x0f)]]
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte)
    }
}

/// SHA-256 (FIPS 180-4), for the hashed stem: any language has it (Python's
/// hashlib, `sha256sum`), and Coordination links no crypto library.
enum SHA256 {
    private static let k: [UInt32] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ]

    static func hash(_ message: [UInt8]) -> [UInt8] {
        var h: [UInt32] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]
        var padded = message + [0x80]
        while padded.count % 64 != 56 { padded.append(0) }
        let bits = UInt64(message.count) &* 8
        padded += (0..<8).reversed().map { UInt8(truncatingIfNeeded: bits >> (8 * UInt64($0))) }
        var w = [UInt32](repeating: 0, count: 64)
        for block in stride(from: 0, to: padded.count, by: 64) {
            for i in 0..<16 {
                w[i] = (0..<4).reduce(0) { $0 << 8 | UInt32(padded[block + 4 * i + $1]) }
            }
            for i in 16..<64 {
                let s0 = rotate(w[i - 15], 7) ^ rotate(w[i - 15], 18) ^ (w[i - 15] >> 3)
                let s1 = rotate(w[i - 2], 17) ^ rotate(w[i - 2], 19) ^ (w[i - 2] >> 10)
                w[i] = w[i - 16] &+ s0 &+ w[i - 7] &+ s1
            }
            var (a, b, c, d, e, f, g, hh) = (h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7])
            for i in 0..<64 {
                let s1 = rotate(e, 6) ^ rotate(e, 11) ^ rotate(e, 25)
                let choice = (e & f) ^ (~e & g)
                let t1 = hh &+ s1 &+ choice &+ k[i] &+ w[i]
                let s0 = rotate(a, 2) ^ rotate(a, 13) ^ rotate(a, 22)
                let majority = (a & b) ^ (a & c) ^ (b & c)
                let t2 = s0 &+ majority
                (hh, g, f, e, d, c, b, a) = (g, f, e, d &+ t1, c, b, a, t1 &+ t2)
            }
            for (i, value) in [a, b, c, d, e, f, g, hh].enumerated() { h[i] = h[i] &+ value }
        }
        return h.flatMap { word in (0..<4).reversed().map { UInt8(truncatingIfNeeded: word >> (8 * UInt32($0))) } }
    }

    private static func rotate(_ x: UInt32, _ n: UInt32) -> UInt32 { x >> n | x << (32 - n) }
}
