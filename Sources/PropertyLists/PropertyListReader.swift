import SystemKit
/// Reads the bytes of a policy file into a tree of `PolicyValue`s: an XML or
/// binary property list, or JSON.
///
/// A policy file is untrusted input, so this is a small reader of our own with
/// hard limits rather than a general decoder: every size, offset and count is
/// checked before use, nesting and the number of values are capped, and the
/// work is linear in the input (shared references in a binary property list
/// are decoded once and their expanded size is capped). Every failure is a
/// `PolicyError` that says where the problem is and what to do.
///
/// Public only as SPI, for the fuzzer (Fuzz/PolicyFuzzer) to compare trees.
@_spi(Fuzzing) public enum PropertyListReader {
    /// A policy is a few dozen lines; the largest real `.entitlements` file is a few KiB.
    package static let maxBytes = 1 << 20
    /// Containers within containers, the top dictionary being level 1.
    static let maxDepth = 32
    /// Values in the tree (a binary property list's shared values count once per use).
    static let maxObjects = 100_000
    /// Bytes of text in the tree, counted as for `maxObjects`.
    static let maxTextBytes = 4 << 20

    static let advice = "Start from one of the files in Policies/."
    static let fix = "Fix the file, or start from one of the files in Policies/."

    /// The top-level dictionary of `bytes`.
    public static func read(_ bytes: [UInt8], source: String) throws(PolicyError) -> [String: PolicyValue] {
        func fail(_ problem: String) -> PolicyError {
            PolicyError(file: source, key: nil, problem: problem)
        }
        guard bytes.count <= maxBytes else {
            throw fail("larger than 1 MiB (\(bytes.count) bytes); a policy is a few lines. \(advice)")
        }
        let top: PolicyValue
        let format: String
        if bytes.starts(with: "bplist".utf8) {
            format = "binary property list"
            guard bytes.starts(with: "bplist00".utf8) else {
                throw fail("binary property list version '\(printable(String(decoding: bytes.prefix(8), as: UTF8.self)))' "
                    + "is not supported, only bplist00; convert it with `plutil -convert xml1`.")
            }
            var reader = BinaryPropertyListReader(bytes, source: source)
            top = try reader.read()
        } else {
            if bytes.starts(with: [0xFE, 0xFF]) || bytes.starts(with: [0xFF, 0xFE]) || bytes.first == 0 {
                throw fail("UTF-16 or UTF-32 text is not supported; save the file as UTF-8. \(advice)")
            }
            try TextInput.validate(bytes, source: source)
            let text = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0  // a UTF-8 byte order mark
            var start = text
            while start < bytes.count, TextInput.isSpace(bytes[start]) { start += 1 }
            switch start < bytes.count ? bytes[start] : 0 {
            case UInt8(ascii: "{"):
                format = "JSON"
                var reader = JSONPolicyReader(bytes, source: source, start: start)
                top = try reader.read()
            case UInt8(ascii: "<"):
                format = "XML property list"
                var reader = XMLPropertyListReader(bytes, source: source, start: text)
                top = try reader.read()
            default:
                throw fail("neither a property list (XML or binary) nor a JSON object. \(advice)")
            }
        }
        guard case .dictionary(let entries) = top else {
            throw fail("the top level of this \(format) is \(top.kind), but a policy is a dictionary of keys. \(advice)")
        }
        return entries
    }

    /// A real number, which reads as an integer if it is one (Foundation's
    /// decoder gave `<real>443</real>` as a port number).
    static func real(_ value: Double?) -> PolicyValue {
        guard let value, value.rounded(.towardZero) == value, value >= -0x1p63, value < 0x1p63 else {
            return .other("a real number")
        }
        return .integer(Int(value))
    }

    /// `text` made safe to print in a message: control, format and unassigned
    /// characters escaped (a hostile file could otherwise drive the terminal),
    /// and cut short, since a message should fit on a line.
    package static func printable(_ text: String, limit: Int = 80) -> String {
        Printable.path(text, limit: limit)
    }
}

/// One value of a property list or JSON policy, for type-checked reading.
@_spi(Fuzzing) public enum PolicyValue: Equatable {
    case bool(Bool)
    case integer(Int)
    case string(String)
    case array([PolicyValue])
    case dictionary([String: PolicyValue])
    /// Dates, data, reals, null and the like, named for messages: only
    /// meaningful in keys sandboxed-run ignores.
    case other(String)

    public var kind: String {
        switch self {
        case .bool(let flag): "boolean \(flag)"
        case .integer(let number): "integer \(number)"
        case .string(let text): "string '\(PropertyListReader.printable(text))'"
        case .array: "an array"
        case .dictionary: "a dictionary"
        case .other(let kind): kind
        }
    }
}

/// Shared by the XML and JSON readers: both are UTF-8 text with lines.
enum TextInput {
    /// The value of a decimal or hexadecimal digit.
    static func digit(_ byte: UInt8) -> UInt64? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt64(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt64(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt64(byte - UInt8(ascii: "A") + 10)
        default: nil
        }
    }

    static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
    }

    /// The line number of `offset`, for messages (counted only when failing).
    static func line(of offset: Int, in bytes: [UInt8]) -> Int {
        var line = 1
        for byte in bytes[..<min(offset, bytes.count)] where byte == 0x0A { line += 1 }
        return line
    }

    /// Refuses bytes that are not UTF-8 (overlong forms, surrogates, beyond
    /// U+10FFFF, cut short) and control characters other than tab and line
    /// ends, which neither XML nor JSON allow raw. Validating once up front
    /// lets the readers slice text at ASCII delimiters without re-checking.
    static func validate(_ bytes: [UInt8], source: String) throws(PolicyError) {
        var index = 0
        let count = bytes.count
        while index < count {
            let lead = bytes[index]
            if lead < 0x80 {
                if lead < 0x20, !isSpace(lead) {
                    throw PolicyError(
                        file: source, key: nil,
                        problem: "line \(line(of: index, in: bytes)): control character 0x\(String(lead, radix: 16)) "
                            + "is not allowed in a policy; remove it. \(PropertyListReader.advice)")
                }
                index += 1
                continue
            }
            var low: UInt8 = 0x80
            var high: UInt8 = 0xBF
            let trailing: Int
            switch lead {
            case 0xC2...0xDF: trailing = 1
            case 0xE0: trailing = 2; low = 0xA0
            case 0xED: trailing = 2; high = 0x9F  // no UTF-16 surrogates
            case 0xE1...0xEF: trailing = 2
            case 0xF0: trailing = 3; low = 0x90
            case 0xF4: trailing = 3; high = 0x8F  // nothing beyond U+10FFFF
            case 0xF1...0xF3: trailing = 3
            default: trailing = -1
            }
            var valid = trailing > 0 && trailing < count - index
            if valid {
                valid = (low...high).contains(bytes[index + 1])
                var next = index + 2
                while valid, next <= index + trailing {
                    valid = bytes[next] & 0xC0 == 0x80
                    next += 1
                }
            }
            guard valid else {
                throw PolicyError(
                    file: source, key: nil,
                    problem: "line \(line(of: index, in: bytes)): byte 0x\(String(lead, radix: 16, uppercase: true)) "
                        + "is not UTF-8 text; save the file as UTF-8. \(PropertyListReader.advice)")
            }
            index += trailing + 1
        }
    }
}
