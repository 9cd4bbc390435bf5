import Foundation
import Testing
@testable import Sandbox

@Suite struct ContainerTests {
    let app = try! AppID("com.example.memo")

    @Test func theContainerIsCreatedOnceWithItsFolders() throws {
        let scratch = Scratch()
        let first = try AppContainer.current(for: app, base: scratch.containers)
        let second = try AppContainer.current(for: app, base: scratch.containers)
        #expect(first == second)
        #expect(first.root == "\(scratch.containers)/containers/com.example.memo/\(first.installID)")
        for folder in [first.documents, first.library, first.temporary] {
            var isDirectory: ObjCBool = false
            #expect(FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory) && isDirectory.boolValue)
        }
    }

    @Test func concurrentFirstLaunchesShareOneContainer() async throws {
        let scratch = Scratch()
        let base = scratch.containers
        let app = self.app
        let roots = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<8 { group.addTask { try AppContainer.current(for: app, base: base).root } }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(roots.count == 1)
    }

    @Test func reinstallMovesTheContentsAndBreaksStoredPaths() throws {
        let scratch = Scratch()
        let old = try AppContainer.current(for: app, base: scratch.containers)
        let stored = old.documents + "/today.md"
        try "note".write(toFile: stored, atomically: true, encoding: .utf8)
        let (before, after) = try AppContainer.reinstall(app, base: scratch.containers)
        #expect(before == old)
        #expect(after.installID != old.installID)
        #expect(try String(contentsOfFile: after.documents + "/today.md", encoding: .utf8) == "note")
        #expect(!FileManager.default.fileExists(atPath: stored), "the absolute path the app stored must break, as on iOS")
        #expect(try AppContainer.current(for: app, base: scratch.containers) == after)
    }

    @Test func severalContainersAreAnErrorNotAGuess() throws {
        let scratch = Scratch()
        let container = try AppContainer.current(for: app, base: scratch.containers)
        try FileManager.default.createDirectory(atPath: container.root + "/../OTHER", withIntermediateDirectories: false)
        #expect(throws: SandboxError.self) { try AppContainer.current(for: app, base: scratch.containers) }
    }

    @Test func theSandboxSeesItsContainerAsHome() throws {
        let scratch = Scratch()
        let outcome = try Run.confined(["/bin/sh", "-c", "echo $HOME; pwd; echo $TMPDIR"], in: scratch, app: "com.example.memo")
        let container = try AppContainer.current(for: app, base: scratch.containers)
        #expect(outcome.output == [container.root, container.root, container.temporary])
    }
}
