/// Names and paths as a person should see them. Folder names are chosen by
/// whoever made the folder, the confined app included: printed raw, an escape
/// sequence in one can retitle the terminal, erase a warning or fake a line.
/// Everything meant for people goes through here; JSON output stays exact.
public enum Printable {
    /// One line, with every control character (C0, DEL, C1), bidirectional
    /// override and backslash escaped, so what is shown is unambiguous.
    /// `limit`: at most that many characters, then "…" (a message line should fit a line).
    public static func path(_ text: String, limit: Int = .max) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        var count = 0
        for scalar in text.unicodeScalars {
            if count == limit {
                out += "…"
                break
            }
            count += 1
            append(scalar, to: &out)
        }
        return out
    }

    /// Raw bytes, such as a path that is not valid UTF-8: valid sequences
    /// as `path` shows them, every other byte as `\xNN`.
    public static func path(bytes: [UInt8]) -> String {
        var out = ""
        var index = 0
        while index < bytes.count {
            if let (scalar, length) = decodeOne(bytes, at: index) {
                append(scalar, to: &out)
                index += length
            } else {
                out += "\\x" + hex(bytes[index])
                index += 1
            }
        }
        return out
    }

    /// A message for stderr: the same escaping, so that whatever a message
    /// quotes cannot break it into lines or drive the terminal.
    public static func message(_ text: String) -> String { path(text) }

    private static func append(_ scalar: Unicode.Scalar, to out: inout String) {
        switch scalar.value {
        case 0x5C: out += "\\\\"
        case 0x0A: out += "\\n"
        case 0x09: out += "\\t"
        case 0x0D: out += "\\r"
        case 0x00..<0x20, 0x7F: out += "\\x" + hex(UInt8(scalar.value))
        default:
            // C1 controls, bidirectional and other format characters, line and
            // paragraph separators, invisible fillers and unassigned code points:
            // each could hide or rearrange what the person reads.
            let properties = scalar.properties
            switch properties.generalCategory {
            case .control, .format, .lineSeparator, .paragraphSeparator, .surrogate, .privateUse, .unassigned:
                out += "\\u{" + String(scalar.value, radix: 16) + "}"
            default:
                if properties.isDefaultIgnorableCodePoint {
                    out += "\\u{" + String(scalar.value, radix: 16) + "}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
    }

    private static func hex(_ byte: UInt8) -> String { hex([byte]) }

    /// The bytes `hex` spells: lower-case digits, two per byte (what `hex`
    /// writes); nil for anything else.
    public static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case 0x30...0x39: digit - 0x30
            case 0x61...0x66: digit - 0x61 + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for pair in stride(from: 0, to: digits.count, by: 2) {
            guard let high = value(digits[pair]), let low = value(digits[pair + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    /// Lower-case hex digits, two per byte.
    public static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes { out += [digits[Int(byte >> 4)], digits[Int(byte & 0xF)]] }
        return String(decoding: out, as: UTF8.self)
    }

    /// One well-formed UTF-8 sequence at `index`, or nil.
    private static func decodeOne(_ bytes: [UInt8], at index: Int) -> (Unicode.Scalar, Int)? {
        let lead = bytes[index]
        let length: Int
        let initial: UInt32
        switch lead {
        case 0x00..<0x80: return (Unicode.Scalar(lead), 1)
        case 0xC2..<0xE0: length = 2; initial = UInt32(lead & 0x1F)
        case 0xE0..<0xF0: length = 3; initial = UInt32(lead & 0x0F)
        case 0xF0..<0xF5: length = 4; initial = UInt32(lead & 0x07)
        default: return nil
        }
        guard index + length <= bytes.count else { return nil }
        var value = initial
        for offset in 1..<length {
            let byte = bytes[index + offset]
            guard byte & 0xC0 == 0x80 else { return nil }
            value = value << 6 | UInt32(byte & 0x3F)
        }
        // Overlong forms and surrogates are not well-formed.
        let minimum: UInt32 = length == 2 ? 0x80 : (length == 3 ? 0x800 : 0x10000)
        guard value >= minimum, let scalar = Unicode.Scalar(value) else { return nil }
        return (scalar, length)
    }
}
