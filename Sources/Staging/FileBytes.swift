@preconcurrency import Glibc
import SystemKit
import SystemPackage

/// A file's bytes from its start, read whole into memory: the staging
/// area's own small files, a file shown in a diff, a conflict version.
enum FileBytes {
    /// At most `count` bytes of `file` from offset 0 (fewer at its end).
    static func read(_ file: OwnedDescriptor, upTo count: Int, path: [UInt8]) throws(StagingError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: max(count, 0))
        var offset = 0
        while offset < bytes.count {
            let read = bytes.withUnsafeMutableBytes { pread(file.rawValue, $0.baseAddress! + offset, $0.count - offset, off_t(offset)) }
            if read < 0 {
                if errno == EINTR { continue }
                throw .system(step: "reading", path: path, errno: Errno(rawValue: errno))
            }
            if read == 0 { break }
            offset += read
        }
        return Array(bytes[0..<offset])
    }
}
