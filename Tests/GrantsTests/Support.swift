import Foundation
import Testing
@testable import Grants
import Sandbox
import SystemPackage

/// A scratch home per test: state, containers and the user's folders.
final class Home {
    let path: String

    init() {
        path = NSTemporaryDirectory() + "sandboxed-run-grants-" + UUID().uuidString
        try! FileManager.default.createDirectory(atPath: path + "/user", withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    var statePath: String { path + "/state/sandboxed-run" }
    var containers: String { path + "/data/sandboxed-run" }

    /// A new broker over the same state, as after a restart.
    func broker() throws -> GrantBroker {
        try GrantBroker(state: StateDirectory(path: statePath), protectedFolders: [containers])
    }

    @discardableResult
    func folder(_ name: String) throws -> String {
        let folder = path + "/user/" + name
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return folder
    }

    func move(_ from: String, _ to: String) throws {
        let parent = (to as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        #expect(rename(from, to) == 0)
    }
}

let memo = try! AppID("com.example.memo")

/// Paths are bytes now; tests still name them as strings.
func == (lhs: FilePath?, rhs: String) -> Bool { lhs == FilePath(rhs) }
func == (lhs: FilePath, rhs: String) -> Bool { lhs == FilePath(rhs) }

/// Reading a child's output in the tests' shared process. Foundation's
/// `readDataToEndOfFile()` traps on a read error, ending every test at once;
/// `readToEnd()` throws, failing one.
extension FileHandle {
    /// Everything until end of file.
    func readAll() throws -> Data { try readToEnd() ?? Data() }
}
