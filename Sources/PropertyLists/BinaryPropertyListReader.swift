import SystemKit
/// Reads a binary property list (`bplist00`): a header, the objects, a table
/// of their offsets and a 32-byte trailer naming the table, the sizes of
/// offsets and object references, and the top object.
///
/// Every offset, count and reference is checked against the file before use.
/// References make the objects a graph, so each object is decoded once and
/// remembered; a cycle is an error, and the tree the graph stands for is
/// capped (depth, values, text), so shared references cannot multiply the
/// work of whoever walks the result. Objects may not overlap, so decoding
/// touches each byte of the file once.
struct BinaryPropertyListReader {
    private let bytes: [UInt8]
    private let source: String
    private var offsets: [Int] = []
    private var referenceSize = 0
    /// Where the objects end: the offset table follows them.
    private var objectsEnd = 0
    private var decodedBytes = 0
    private var hashedKeyBytes = 0
    private var states: [State] = []

    private enum State {
        case unread
        case reading
        /// `levels`: the containers on the longest path down from it, itself included.
        case read(PolicyValue, Size)
    }

    /// What an object stands for once shared references are expanded.
    private struct Size {
        var levels = 0
        var values = 1
        var textBytes = 0
    }

    init(_ bytes: [UInt8], source: String) {
        self.bytes = bytes
        self.source = source
    }

    mutating func read() throws(PolicyError) -> PolicyValue {
        let header = 8
        let trailerSize = 32
        guard bytes.count >= header + 1 + 1 + trailerSize else {
            throw fail("too short (\(bytes.count) bytes) to be a binary property list")
        }
        let trailer = bytes.count - trailerSize
        let offsetSize = Int(bytes[trailer + 6])
        referenceSize = Int(bytes[trailer + 7])
        let objectCount = unsigned(at: trailer + 8, size: 8)
        let topObject = unsigned(at: trailer + 16, size: 8)
        let tableOffset = unsigned(at: trailer + 24, size: 8)
        guard (1...8).contains(offsetSize), (1...8).contains(referenceSize) else {
            throw fail("the trailer gives offsets of \(offsetSize) bytes and references of \(referenceSize); both must be 1 to 8")
        }
        guard objectCount >= 1, objectCount <= UInt64(PropertyListReader.maxObjects) else {
            throw fail("the trailer claims \(objectCount) objects; at least 1 and at most \(PropertyListReader.maxObjects) are allowed")
        }
        guard topObject < objectCount else {
            throw fail("the trailer names object \(topObject) as the top, but there are \(objectCount)")
        }
        // As Apple's reader requires: references able to name every object, offsets to reach the table.
        guard referenceSize == 8 || UInt64(1) << (8 * referenceSize) > objectCount,
            offsetSize == 8 || UInt64(1) << (8 * offsetSize) > tableOffset
        else {
            throw fail("references of \(referenceSize) bytes cannot name \(objectCount) objects, "
                + "or offsets of \(offsetSize) bytes cannot reach the table at \(tableOffset)")
        }
        let count = Int(objectCount)
        // objectCount is at most 100,000 and offsetSize at most 8: no overflow.
        // Apple's reader wants the table to end where the trailer starts.
        guard tableOffset > UInt64(header), tableOffset <= UInt64(trailer),
            count * offsetSize == trailer - Int(tableOffset)
        else {
            throw fail("the offset table (at \(tableOffset), \(count) entries of \(offsetSize) bytes) does not end where the trailer starts")
        }
        objectsEnd = Int(tableOffset)
        offsets.reserveCapacity(count)
        for index in 0..<count {
            let offset = unsigned(at: objectsEnd + index * offsetSize, size: offsetSize)
            guard offset >= UInt64(header), offset < UInt64(objectsEnd) else {
                throw fail(object: index, "its offset \(offset) is outside the objects (\(header) to \(objectsEnd))")
            }
            offsets.append(Int(offset))
        }
        states = Array(repeating: .unread, count: count)
        return try object(Int(topObject), within: 0).0
    }

    /// The value of object `index`, which sits below `containers` containers.
    private mutating func object(_ index: Int, within containers: Int) throws(PolicyError) -> (PolicyValue, Size) {
        switch states[index] {
        case .reading:
            throw fail(object: index, "it contains itself (a reference cycle)")
        case .read(let value, let size):
            guard containers + size.levels <= PropertyListReader.maxDepth else { throw tooDeep(index) }
            return (value, size)
        case .unread:
            states[index] = .reading
            let result = try decode(index, within: containers)
            states[index] = .read(result.0, result.1)
            return result
        }
    }

    private mutating func decode(_ index: Int, within containers: Int) throws(PolicyError) -> (PolicyValue, Size) {
        var at = offsets[index]
        let marker = bytes[at]
        at += 1
        let low = Int(marker & 0x0F)
        switch marker >> 4 {
        case 0x0:
            try consume(index, from: at - 1, to: at)
            switch marker {
            case 0x08: return (.bool(false), Size())
            case 0x09: return (.bool(true), Size())
            case 0x00: return (.other("null"), Size())
            default: throw fail(object: index, "unknown object type 0x\(String(marker, radix: 16))")
            }
        case 0x1:
            guard low <= 4 else { throw fail(object: index, "an integer of 2^\(low) bytes") }
            let size = 1 << low
            try need(index, at, size)
            try consume(index, from: at - 1, to: at + size)
            return (.integer(try integer(index, at: at, size: size)), Size())
        case 0x2:
            guard low == 2 || low == 3 else { throw fail(object: index, "a real number of 2^\(low) bytes") }
            try need(index, at, 1 << low)
            try consume(index, from: at - 1, to: at + (1 << low))
            let bits = unsigned(at: at, size: 1 << low)
            return (PropertyListReader.real(low == 2 ? Double(Float(bitPattern: UInt32(bits))) : Double(bitPattern: bits)), Size())
        case 0x3:
            guard marker == 0x33 else { throw fail(object: index, "unknown object type 0x\(String(marker, radix: 16))") }
            try need(index, at, 8)
            try consume(index, from: at - 1, to: at + 8)
            return (.other("a date"), Size())
        case 0x4:
            let length = try count(index, low, &at)
            try need(index, at, length)
            try consume(index, from: offsets[index], to: at + length)
            return (.other("data"), Size())
        case 0x5:
            let length = try count(index, low, &at)
            try need(index, at, length)
            try consume(index, from: offsets[index], to: at + length)
            let text = bytes[at..<(at + length)]
            guard text.allSatisfy({ $0 != 0 && $0 < 0x80 }) else {
                throw fail(object: index, "an ASCII string holds a NUL or a byte above 0x7F")
            }
            let string = String(decoding: text, as: UTF8.self)
            try refuseNull(string, index)
            return (.string(string), Size(textBytes: length))
        case 0x6:
            let units = try count(index, low, &at)
            guard units <= (objectsEnd - at) / 2 else { throw fail(object: index, "a string of \(units) characters runs past the objects") }
            try consume(index, from: offsets[index], to: at + 2 * units)
            var utf16: [UInt16] = []
            utf16.reserveCapacity(units)
            for unit in 0..<units { utf16.append(UInt16(bytes[at + 2 * unit]) << 8 | UInt16(bytes[at + 2 * unit + 1])) }
            guard !utf16.contains(0), let text = String(validating: utf16, as: UTF16.self) else {
                throw fail(object: index, "a UTF-16 string holds a NUL or half a surrogate pair")
            }
            try refuseNull(text, index)
            return (.string(text), Size(textBytes: text.utf8.count))
        case 0x8:
            try need(index, at, low + 1)
            try consume(index, from: at - 1, to: at + low + 1)
            return (.other("a UID"), Size())
        case 0xA, 0xC:
            let count = try count(index, low, &at)
            guard count <= (objectsEnd - at) / referenceSize else {
                throw fail(object: index, "an array of \(count) references runs past the objects")
            }
            try consume(index, from: offsets[index], to: at + count * referenceSize)
            guard marker >> 4 == 0xA else { return (.other("a set"), Size()) }  // only meaningful in keys we ignore
            guard containers < PropertyListReader.maxDepth else { throw tooDeep(index) }
            var items: [PolicyValue] = []
            items.reserveCapacity(count)
            var size = Size(levels: 1)
            for item in 0..<count {
                let (value, itemSize) = try object(try reference(at: at + item * referenceSize, in: index), within: containers + 1)
                items.append(value)
                try add(itemSize, to: &size, index)
            }
            return (.array(items), size)
        case 0xD:
            let count = try count(index, low, &at)
            guard count <= (objectsEnd - at) / (2 * referenceSize) else {
                throw fail(object: index, "a dictionary of \(count) entries runs past the objects")
            }
            try consume(index, from: offsets[index], to: at + 2 * count * referenceSize)
            guard containers < PropertyListReader.maxDepth else { throw tooDeep(index) }
            var entries: [String: PolicyValue] = [:]
            entries.reserveCapacity(count)
            var size = Size(levels: 1)
            for entry in 0..<count {
                let (key, keySize) = try object(try reference(at: at + entry * referenceSize, in: index), within: containers + 1)
                guard case .string(let name) = key else {
                    throw fail(object: index, "a dictionary key is \(key.kind), not a string")
                }
                // A key object may be shared by many dictionaries: bound the hashing too.
                hashedKeyBytes += keySize.textBytes
                guard hashedKeyBytes <= PropertyListReader.maxTextBytes else { throw tooLarge(index) }
                let (value, valueSize) = try object(
                    try reference(at: at + (count + entry) * referenceSize, in: index), within: containers + 1)
                guard entries.updateValue(value, forKey: name) == nil else {
                    throw fail(object: index, "key '\(PropertyListReader.printable(name))' appears twice in one dictionary; keep one")
                }
                try add(keySize, to: &size, index)
                try add(valueSize, to: &size, index)
            }
            return (.dictionary(entries), size)
        default:
            throw fail(object: index, "unknown object type 0x\(String(marker, radix: 16))")
        }
    }

    /// Foundation's PropertyListDecoder reads the string `$null` as no value.
    private func refuseNull(_ text: String, _ index: Int) throws(PolicyError) {
        guard text != "$null" else {
            throw fail(object: index, "the string '$null' is read as no value by Apple's decoder")
        }
    }

    /// Adds a child's expanded size to its container's, within the limits.
    private func add(_ child: Size, to size: inout Size, _ index: Int) throws(PolicyError) {
        size.levels = max(size.levels, child.levels + 1)
        // Each term is within the limits already, so the sums cannot overflow.
        size.values += child.values
        size.textBytes += child.textBytes
        guard size.values <= PropertyListReader.maxObjects, size.textBytes <= PropertyListReader.maxTextBytes else {
            throw tooLarge(index)
        }
    }

    /// Accounts for the bytes of an object: writers never overlap objects, and
    /// overlapping ones could make a small file decode the same bytes many times.
    private mutating func consume(_ index: Int, from start: Int, to end: Int) throws(PolicyError) {
        decodedBytes += end - start
        guard decodedBytes <= objectsEnd - 8 else { throw fail(object: index, "objects overlap") }
    }

    /// A count: in the marker's low four bits, or (0xF) in an integer object after it.
    private func count(_ index: Int, _ low: Int, _ at: inout Int) throws(PolicyError) -> Int {
        guard low == 0xF else { return low }
        guard at < objectsEnd, bytes[at] >> 4 == 0x1, bytes[at] & 0x0F <= 3 else {
            throw fail(object: index, "a count is not an integer of 1 to 8 bytes")
        }
        let size = 1 << Int(bytes[at] & 0x0F)
        try need(index, at + 1, size)
        let value = unsigned(at: at + 1, size: size)
        at += 1 + size
        guard value <= UInt64(objectsEnd) else { throw fail(object: index, "a count of \(value) is larger than the file") }
        return Int(value)
    }

    private func need(_ index: Int, _ at: Int, _ size: Int) throws(PolicyError) {
        guard at <= objectsEnd, size <= objectsEnd - at else { throw fail(object: index, "it runs past the objects") }
    }

    private func reference(at offset: Int, in index: Int) throws(PolicyError) -> Int {
        let target = unsigned(at: offset, size: referenceSize)
        guard target < UInt64(states.count) else {
            throw fail(object: index, "it refers to object \(target), but there are \(states.count)")
        }
        return Int(target)
    }

    /// Integers of 1, 2 and 4 bytes are unsigned, of 8 signed; 16-byte ones
    /// (which writers use for values above Int64.max) must be from 0 to
    /// Int.max: Foundation keeps only their low 8 bytes, unsigned, and
    /// CoreFoundation all 16, signed, so a negative one means two things.
    private func integer(_ index: Int, at offset: Int, size: Int) throws(PolicyError) -> Int {
        switch size {
        case 1, 2, 4: return Int(unsigned(at: offset, size: size))
        case 8: return Int(Int64(bitPattern: unsigned(at: offset, size: 8)))
        default:
            let high = unsigned(at: offset, size: 8)
            let low = Int64(bitPattern: unsigned(at: offset + 8, size: 8))
            guard high == 0, low >= 0 else {
                throw fail(object: index, "a 16-byte integer out of range (0 to \(Int.max))")
            }
            return Int(low)
        }
    }

    /// A big-endian unsigned integer of `size` (at most 8) bytes, in bounds.
    private func unsigned(at offset: Int, size: Int) -> UInt64 {
        var value: UInt64 = 0
        for byte in bytes[offset..<(offset + size)] { value = value << 8 | UInt64(byte) }
        return value
    }

    private func tooDeep(_ index: Int) -> PolicyError {
        fail(object: index, "containers nested more than \(PropertyListReader.maxDepth) deep; a policy needs two levels")
    }

    private func tooLarge(_ index: Int) -> PolicyError {
        fail(object: index, "with shared references expanded, more than \(PropertyListReader.maxObjects) values "
            + "or \(PropertyListReader.maxTextBytes >> 20) MiB of text; a policy has a few dozen values")
    }

    private func fail(object index: Int? = nil, _ problem: String) -> PolicyError {
        let place = index.map { "binary property list object \($0)" } ?? "binary property list"
        return PolicyError(file: source, key: nil, problem: "\(place): \(problem). \(PropertyListReader.fix)")
    }
}
