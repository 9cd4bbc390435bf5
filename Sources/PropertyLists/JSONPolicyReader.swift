import SystemKit
/// Reads a JSON policy (RFC 8259): an object with the same keys as a property
/// list. Integral numbers are integers; others, and null, are kept only as a
/// kind for messages. Trailing commas are allowed, as Foundation's decoder did. The input has been checked to
/// be UTF-8 without stray control characters.
struct JSONPolicyReader {
    private let bytes: [UInt8]
    private let source: String
    private var at: Int
    private var objects = 0

    init(_ bytes: [UInt8], source: String, start: Int) {
        self.bytes = bytes
        self.source = source
        self.at = start
    }

    mutating func read() throws(PolicyError) -> PolicyValue {
        let top = try value(depth: 1)
        skipSpace()
        guard at == bytes.count else { throw fail("text after the end of the top-level object") }
        return top
    }

    private mutating func value(depth: Int) throws(PolicyError) -> PolicyValue {
        skipSpace()
        guard at < bytes.count else { throw fail("the text ends where a value should be") }
        objects += 1
        guard objects <= PropertyListReader.maxObjects else {
            throw fail("more than \(PropertyListReader.maxObjects) values; a policy has a few dozen")
        }
        switch bytes[at] {
        case UInt8(ascii: "{"):
            guard depth <= PropertyListReader.maxDepth else { throw tooDeep() }
            at += 1
            var entries: [String: PolicyValue] = [:]
            skipSpace()
            if take("}") { return .dictionary(entries) }
            while true {
                skipSpace()
                let keyOffset = at
                guard at < bytes.count, bytes[at] == UInt8(ascii: "\"") else { throw fail("expected a key in double quotes") }
                let key = try string()
                skipSpace()
                guard take(":") else { throw fail("expected ':' after key '\(PropertyListReader.printable(key))'") }
                let entry = try value(depth: depth + 1)
                guard entries.updateValue(entry, forKey: key) == nil else {
                    throw fail(at: keyOffset, "key '\(PropertyListReader.printable(key))' appears twice in one object; keep one")
                }
                skipSpace()
                if take("}") { return .dictionary(entries) }
                guard take(",") else { throw fail("expected ',' or '}' in an object") }
                skipSpace()
                if take("}") { return .dictionary(entries) }  // a trailing comma, as Foundation's decoder allowed
            }
        case UInt8(ascii: "["):
            guard depth <= PropertyListReader.maxDepth else { throw tooDeep() }
            at += 1
            var items: [PolicyValue] = []
            skipSpace()
            if take("]") { return .array(items) }
            while true {
                items.append(try value(depth: depth + 1))
                skipSpace()
                if take("]") { return .array(items) }
                guard take(",") else { throw fail("expected ',' or ']' in an array") }
                skipSpace()
                if take("]") { return .array(items) }  // a trailing comma
            }
        case UInt8(ascii: "\""):
            return .string(try string())
        case UInt8(ascii: "t"):
            guard take("true") else { throw fail("unexpected text; did you mean true?") }
            return .bool(true)
        case UInt8(ascii: "f"):
            guard take("false") else { throw fail("unexpected text; did you mean false?") }
            return .bool(false)
        case UInt8(ascii: "n"):
            guard take("null") else { throw fail("unexpected text; did you mean null?") }
            return .other("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return try number()
        default:
            throw fail("unexpected character '\(PropertyListReader.printable(String(decoding: bytes[at...].prefix(1), as: UTF8.self)))'; "
                + "expected a value")
        }
    }

    private func tooDeep() -> PolicyError {
        fail("nested more than \(PropertyListReader.maxDepth) deep; a policy needs two levels")
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    private mutating func number() throws(PolicyError) -> PolicyValue {
        let start = at
        let negative = take("-")
        func digits() -> Int {
            let first = at
            while at < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[at]) { at += 1 }
            return at - first
        }
        let integerStart = at
        let integerDigits = digits()
        guard integerDigits > 0 else { throw fail(at: start, "'-' is not followed by a number") }
        guard integerDigits == 1 || bytes[integerStart] != UInt8(ascii: "0") else {
            throw fail(at: start, "a number with a leading zero")
        }
        var integral = true
        if take(".") {
            integral = false
            guard digits() > 0 else { throw fail(at: start, "a number ends in '.'") }
        }
        if take("e") || take("E") {
            integral = false
            _ = take("+") || take("-")
            guard digits() > 0 else { throw fail(at: start, "a number's exponent has no digits") }
        }
        guard integral else {
            // An integral real reads as an integer, as Foundation's decoder did;
            // a long one is not parsed at all (strtod's work grows with digits).
            return PropertyListReader.real(at - start <= 64 ? Double(String(decoding: bytes[start..<at], as: UTF8.self)) : nil)
        }
        var magnitude: UInt64 = 0
        for byte in bytes[integerStart..<at] {
            let (shifted, overflow) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, carry) = shifted.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
            guard !overflow, !carry, sum <= UInt64(Int.max) + (negative ? 1 : 0) else {
                throw fail(at: start, "\(String(decoding: bytes[start..<at].prefix(40), as: UTF8.self)) is out of range "
                    + "(\(Int.min) to \(Int.max))")
            }
            magnitude = sum
        }
        return .integer(negative ? Int(truncatingIfNeeded: 0 &- magnitude) : Int(magnitude))
    }

    /// A string at the opening quote, with escapes and `\u` surrogate pairs.
    private mutating func string() throws(PolicyError) -> String {
        let open = at
        at += 1
        var result: [UInt8] = []
        var run = at
        while true {
            guard at < bytes.count else { throw fail(at: open, "a string is not closed with '\"'") }
            switch bytes[at] {
            case UInt8(ascii: "\""):
                result += bytes[run..<at]
                at += 1
                return String(decoding: result, as: UTF8.self)
            case UInt8(ascii: "\\"):
                result += bytes[run..<at]
                try escape(into: &result)
                run = at
            case 0..<0x20:
                throw fail("a line break or tab inside a string; write it as \\n or \\t")
            default:
                at += 1
            }
        }
    }

    private mutating func escape(into result: inout [UInt8]) throws(PolicyError) {
        let start = at
        at += 1
        guard at < bytes.count else { throw fail(at: start, "a string ends in '\\'") }
        let letter = bytes[at]
        at += 1
        switch letter {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): result.append(letter)
        case UInt8(ascii: "b"): result.append(0x08)
        case UInt8(ascii: "f"): result.append(0x0C)
        case UInt8(ascii: "n"): result.append(0x0A)
        case UInt8(ascii: "r"): result.append(0x0D)
        case UInt8(ascii: "t"): result.append(0x09)
        case UInt8(ascii: "u"):
            var value = try hex4(start)
            if (0xD800..<0xDC00).contains(value) {
                guard take("\\u") else { throw fail(at: start, "\\u\(hex(value)) is half a surrogate pair") }
                let low = try hex4(start)
                guard (0xDC00..<0xE000).contains(low) else {
                    throw fail(at: start, "\\u\(hex(value)) is not followed by the second half of its surrogate pair")
                }
                value = 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
            }
            guard value != 0, let scalar = Unicode.Scalar(value) else {
                throw fail(at: start, "\\u\(hex(value)) is not a character allowed in a policy")
            }
            UTF8.encode(scalar) { result.append($0) }
        default:
            throw fail(at: start, "unknown escape in a string; use \\\\ for a backslash")
        }
    }

    private func hex(_ value: UInt32) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    private mutating func hex4(_ start: Int) throws(PolicyError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard at < bytes.count, let digit = TextInput.digit(bytes[at]) else {
                throw fail(at: start, "\\u needs four hexadecimal digits")
            }
            value = value << 4 | UInt32(digit)
            at += 1
        }
        return value
    }

    private mutating func skipSpace() {
        while at < bytes.count, TextInput.isSpace(bytes[at]) { at += 1 }
    }

    /// Consumes `text` if it comes next.
    private mutating func take(_ text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard count <= bytes.count - at else { return false }
        let pointer = text.utf8Start
        for offset in 0..<count where bytes[at + offset] != pointer[offset] { return false }
        at += count
        return true
    }

    private func fail(at offset: Int? = nil, _ problem: String) -> PolicyError {
        PolicyError(
            file: source, key: nil,
            problem: "JSON line \(TextInput.line(of: offset ?? at, in: bytes)): \(problem). \(PropertyListReader.fix)")
    }
}
