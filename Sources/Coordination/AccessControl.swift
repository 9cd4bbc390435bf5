@preconcurrency import Glibc
import CSyscalls
import SystemKit
import SystemPackage

/// POSIX ACLs, as the kernel stores them in extended attributes, for the
/// copies the protocol makes (temporaries, stubs, conflict versions and
/// their folders). Two things make a copy more readable than its original
/// unless handled: with an access ACL, a file's group bits are the ACL's
/// mask, not its group's permissions, so copying `st_mode` opens the file
/// to its group; and a file made in a folder with a default ACL inherits
/// it, so the folder's named users get in. So every copy first loses what
/// it inherited, then gets the original's access ACL verbatim, or its mode.
enum AccessControl {
    static let access = "system.posix_acl_access"
    static let defaults = "system.posix_acl_default"

    /// An ACL as read from a file.
    enum Found: Equatable {
        /// None (or a filesystem that keeps none): the mode is the whole truth.
        case none
        /// Its bytes (version 2 header and entries, as `getfacl` would show them).
        case list([UInt8])
        /// It could not be read: assume the worst.
        case unknown
    }

    /// The ACL `name` of the file `fd` is open on; an O_PATH descriptor is
    /// read through /proc/self/fd (and is `.unknown` where /proc is missing).
    static func read(_ name: String, of fd: CInt) -> Found {
        var size = 256
        for _ in 0..<4 {
            var bytes = [UInt8](repeating: 0, count: size)
            do {
                let count: Int
                do {
                    count = try syscallRetrying { bytes.withUnsafeMutableBytes { csb_fgetxattr(fd, name, $0.baseAddress, $0.count) } }
                } catch .badFileDescriptor {
                    count = try syscallRetrying { bytes.withUnsafeMutableBytes { csb_getxattr_fd(fd, name, $0.baseAddress, $0.count) } }
                }
                return count == 0 ? .none : .list(Array(bytes.prefix(count)))
            } catch .noData, .notSupported {
                return .none
            } catch .outOfRange {
                size *= 4
            } catch {
                return .unknown
            }
        }
        return .unknown
    }

    /// Removes the ACLs a file or folder just made inherited from its
    /// folder's default ACL (a folder's own default ACL too): true when it
    /// has none left.
    static func removeInherited(from fd: CInt, folder: Bool) -> Bool {
        for name in folder ? [access, defaults] : [access] {
            switch read(name, of: fd) {
            case .none: continue
            case .unknown: return false
            case .list:
                do { _ = try syscallRetrying { csb_fremovexattr(fd, name) } } catch .noData {} catch { return false }
            }
        }
        return true
    }

    /// Sets the access ACL `list` on `fd` (which also sets its permission bits): false when it could not.
    static func apply(_ list: [UInt8], to fd: CInt) -> Bool {
        (try? syscallRetrying { list.withUnsafeBytes { csb_fsetxattr(fd, access, $0.baseAddress!, $0.count) } }) != nil
    }

    /// The access ACL of a folder that holds copies of a file with ACL
    /// `list` (`file`), or of a folder with ACL `list`: each entry may list
    /// and enter it where it may read the original, nobody but the owner
    /// may write it. nil when `list` is not an ACL this code knows.
    static func forFolder(_ list: [UInt8], file: Bool) -> [UInt8]? {
        guard list.count >= 4, (list.count - 4) % 8 == 0, list.prefix(4).elementsEqual([2, 0, 0, 0]) else { return nil }
        var result = Array(list.prefix(4))
        for start in stride(from: 4, to: list.count, by: 8) {
            let tag = UInt16(list[start]) | UInt16(list[start + 1]) << 8
            let permissions = UInt16(list[start + 2]) | UInt16(list[start + 3]) << 8
            let owner: UInt16 = 0x01
            let folder: UInt16 = tag == owner ? 7 : file ? (permissions & 4 != 0 ? 5 : 0) : permissions & 5
            result += list[start..<(start + 2)] + [UInt8(folder), 0] + list[(start + 4)..<(start + 8)]
        }
        return result
    }
}
